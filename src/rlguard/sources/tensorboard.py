"""TensorBoard event files (``events.out.tfevents.*``), read without TensorFlow.

The file is a sequence of TFRecords (``uint64 length, uint32 crc, data, uint32 crc``), each
``data`` an ``Event`` protocol buffer: ``wall_time`` (1), ``step`` (2), ``summary`` (5), whose
``value`` entries (1) carry a ``tag`` (1) and either a ``simple_value`` (2, what PyTorch's
``SummaryWriter`` and transformers' ``TensorBoardCallback`` write) or a scalar ``tensor`` (8,
what ``tf.summary.scalar`` writes: float/double in ``float_val``/``double_val`` or
``tensor_content``). Histograms, images, text and graphs are skipped.

Writers emit one event per scalar; consecutive events of the same step become one record.
**Following a growing file** (the daemon), the newest step may be only partly written (the
writer's buffer reached the disk in the middle of a step), so it is held back in the reader's
context until a later step appears, where its scalars are joined with any that came since;
the follower releases it once the file has been quiet (:meth:`Reader.release`). A step is thus
judged once, with all the scalars written together for it, and none is lost when a run ends.
``line`` is the number of the TFRecord in the file. A truncated last record (a run still
writing) is dropped and noted; a corrupt length stops reading with a warning, keeping what
came before. CRCs are not verified (they guard against disk corruption, which the length and
protobuf checks catch well enough for monitoring).
"""
from __future__ import annotations

import struct
from typing import IO, Iterator

from ._common import MemoryLog, note_bad, open_binary, reading
from .base import Appended, LogRecord, ReadStats, Reader

_MAX_RECORD = 64 * 1024 * 1024  # a record larger than this means a corrupt length field
_DT_FLOAT, _DT_DOUBLE = 1, 2


class TensorBoardReader(Reader):
    """TensorBoard ``events.out.tfevents.*`` files (scalars only)."""

    name = "tensorboard"
    summary = "TensorBoard event file (events.out.tfevents.*), scalar summaries"

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        return "brain.Event:" in head[:256] or "tfevents" in str(path).rsplit("/", 1)[-1]

    def records(self, path: str) -> Iterator[LogRecord]:
        self.stats = stats = ReadStats()
        self.consumed = 0  # bytes of complete records read (a tail continues from there)
        with open_binary(path) as f, reading(path, stats):
            yield from _group_by_step(_events(f, stats, self), stats)


    def read_appended(self, data: bytes, path: str, first_unit: int, context: dict) -> Appended:
        """Complete TFRecords at the start of ``data``; a record being written waits, and so
        does the newest step (held in the context: more of its scalars may follow)."""
        self.tailing, self.first_record = True, first_unit - 1
        records = list(self.records(MemoryLog(data, path)))
        units = self.stats.lines - (1 if self.consumed < len(data) else 0)
        held, context = _unhold(context)
        if held is not None:
            records = _rejoin(held, records)
        if records:
            last = records.pop()
            context[_HELD] = [last.step, last.metrics, last.line]
        return Appended(records, self.consumed, max(units, 0), self.stats.bad_lines, context)

    def release(self, context: dict) -> tuple[list[LogRecord], dict]:
        held, context = _unhold(context)
        return ([held] if held is not None else []), context


_HELD = "held"  # the newest step of a growing file: [step, {tag: value}, record number]


def _unhold(context: dict) -> tuple[LogRecord | None, dict]:
    """The held step (or None) and the context without it."""
    rest = {k: v for k, v in context.items() if k != _HELD}
    held = context.get(_HELD)
    if not (isinstance(held, list) and len(held) == 3 and isinstance(held[1], dict)):
        return None, rest
    return LogRecord(int(held[0]), {str(k): float(v) for k, v in held[1].items()}, int(held[2])), rest


def _rejoin(held: LogRecord, records: list[LogRecord]) -> list[LogRecord]:
    """The held step before the records read since; joined with the first of them when that
    is the rest of the same step (later values of a tag win, as within one read)."""
    if records and records[0].step == held.step:
        records[0] = LogRecord(held.step, {**held.metrics, **records[0].metrics}, held.line)
        return records
    return [held, *records]


def _events(f: IO[bytes], stats: ReadStats, reader=None) -> Iterator[tuple[int, int, dict[str, float]]]:
    """(record number, step, scalars) of each event that carries scalars."""
    n = 0
    first = getattr(reader, "first_record", 0)
    while True:
        header = f.read(12)
        if not header:
            return
        n += 1
        stats.lines = n
        if len(header) < 12:
            if not getattr(reader, "tailing", False):  # a tail just waits for the rest
                note_bad(stats, n, "truncated record header at the end of the file (still being written?)")
            return
        (length,) = struct.unpack("<Q", header[:8])
        if length > _MAX_RECORD:
            stats.warnings.append(f"record {n}: impossible length {length}; stopped reading there")
            return
        data = f.read(length)
        if len(data) < length or len(f.read(4)) < 4:
            if not getattr(reader, "tailing", False):  # a tail just waits for the rest
                note_bad(stats, n, "truncated last record (still being written?)")
            return
        if reader is not None:
            reader.consumed += 16 + length
        try:
            step, scalars = _parse_event(data)
        except (ValueError, IndexError, struct.error) as exc:
            note_bad(stats, n, f"unreadable event: {exc}")
            continue
        if scalars:
            yield n + first, step, scalars
        else:
            stats.skipped_lines += 1  # file version, graphs, histograms, images...


def _group_by_step(events, stats: ReadStats) -> Iterator[LogRecord]:
    cur_step, cur, line = None, {}, 0
    for n, step, scalars in events:
        if step != cur_step and cur:
            stats.records += 1
            yield LogRecord(cur_step, cur, line)
            cur = {}
        if not cur:
            line = n
        cur_step = step
        cur.update(scalars)
    if cur:
        stats.records += 1
        yield LogRecord(cur_step, cur, line)


# ------------------------------------------------------------------ minimal protobuf decoding

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a message: ints for varint/fixed, bytes for length."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = _varint(buf, pos)
        elif wire == 1:
            val, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            val, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            val, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > end:
            raise ValueError("field runs past the end of the message")
        yield num, wire, val


def _parse_event(data: bytes) -> tuple[int, dict[str, float]]:
    step, scalars = 0, {}
    for num, wire, val in _fields(data):
        if num == 2 and wire == 0:
            step = val - (1 << 64) if val >= 1 << 63 else val
        elif num == 5 and wire == 2:
            for vnum, vwire, v in _fields(val):
                if vnum == 1 and vwire == 2:
                    tag, value = _parse_value(v)
                    if tag is not None and value is not None:
                        scalars[tag] = value
    return step, scalars


def _parse_value(buf: bytes) -> tuple[str | None, float | None]:
    tag, value = None, None
    for num, wire, val in _fields(buf):
        if num == 1 and wire == 2:
            tag = val.decode("utf-8", "replace")
        elif num == 2 and wire == 5:
            value = struct.unpack("<f", val)[0]
        elif num == 8 and wire == 2:
            value = _scalar_tensor(val)
    return tag, value


def _scalar_tensor(buf: bytes) -> float | None:
    """The value of a scalar float/double TensorProto, else None (histograms, strings...)."""
    dtype, values = None, []
    content = b""
    for num, wire, val in _fields(buf):
        if num == 1 and wire == 0:
            dtype = val
        elif num == 4 and wire == 2:
            content = val
        elif num == 5:  # float_val, packed (2) or not (5)
            values += list(struct.unpack(f"<{len(val) // 4}f", val)) if wire == 2 else [struct.unpack("<f", val)[0]]
        elif num == 6:  # double_val
            values += list(struct.unpack(f"<{len(val) // 8}d", val)) if wire == 2 else [struct.unpack("<d", val)[0]]
    if content and dtype == _DT_FLOAT and len(content) == 4:
        values = [struct.unpack("<f", content)[0]]
    elif content and dtype == _DT_DOUBLE and len(content) == 8:
        values = [struct.unpack("<d", content)[0]]
    return float(values[0]) if len(values) == 1 and dtype in (_DT_FLOAT, _DT_DOUBLE) else None
