"""W&B run files (``run-<id>.wandb`` in ``wandb/run-*/`` and ``wandb/offline-run-*/``): history rows.

The file is W&B's transaction log, written by the run itself (online or offline): a 7-byte
header (``:W&B``, magic ``0xBEE1``, version 0), then LevelDB-log framing: 32 KiB blocks of
chunks ``crc32 u32 | length u16 | type u8 | data``, a record being one FULL chunk or FIRST,
MIDDLE..., LAST chunks across blocks; a block's last bytes, when fewer than a chunk header,
are zero padding. Each record is a ``wandb_internal_pb2.Record`` protobuf, decoded with the
``wandb`` package's own message classes (extra ``rlguard[wandb]``). The framing is read here:
the package's Python reader (``wandb.sdk.internal.datastore``) left with the move to the Go
``wandb-core``, and a reader of our own can resume from any record boundary (below).

Only ``history`` records (one per committed ``wandb.log`` call) become records; summaries,
console output, system stats and config are passed over without being counted.

* step: ``train/global_step`` (transformers' ``WandbCallback``: the optimizer step), else
  ``global_step`` or ``step``; that key is not a metric. A row without one (a table logged
  on its own) takes the previous row's step once one had it, else W&B's own ``_step``.
* names: the logged key (``train/loss``); nested dicts are joined with ``.`` as W&B shows them.
* values: numbers as floats, NaN and +-inf kept; ``null`` as in JSONL logs (``NULL_NAN``),
  except a null ``train/reward`` (TRL's blank reward, logged by ``WandbCallback``): the derived
  metric ``reward_blank`` (:mod:`rlguard.sources.blanks`); the null spread and per-function
  means TRL writes with it (``train/reward_std``, ``train/rewards/<fn>/mean``) are not logged.
  Strings, bools, lists and media (histograms, tables, images: an object with a ``_type``)
  are dropped and counted in ``stats.bad_values``. W&B's bookkeeping (``_step``, ``_runtime``,
  ``_timestamp``, ``_wandb``) is not kept. A row left without metrics is not a record.
* ``line`` is the number of the record in the file (1 = the first after the header).

Damage: a chunk whose CRC fails or a record that does not decode is counted (``bad_lines``)
and skipped; a chunk header that cannot be right (unknown type, length past its block) skips
to the next block, as LevelDB readers do. A record cut at the end (a run still writing) is
noted as in TensorBoard files. Nothing here raises for a damaged record.

Following (``follow = "append"``): the follower's offset is always the end of a complete
record (or of block padding after one); the context keeps that absolute offset, so the
reader knows where the next block boundary falls whatever the slice it is handed. A running
W&B process flushes the file every 15 s (its ``x_transaction_log_flush_interval``) and when a
buffer fills, so rows reach the file, and rlguard, in bursts.
"""
from __future__ import annotations

import io
import json
import struct
import zlib
from typing import IO, Iterator

from ..core.errors import LogFormatError
from ._common import json_metric, note_bad, open_binary, reading, short, to_step
from .base import NULL_NAN, Appended, LogRecord, ReadStats, Reader
from .blanks import REWARD_BLANK, REWARD_KEYS, reward_family

HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
_BLOCK, _CHUNK = 32 * 1024, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_SEED = [zlib.crc32(bytes([kind])) for kind in range(5)]
#: a record larger than this is skipped (history rows are KBs; a follower must never wait
#: for a record that cannot fit in the slice it reads)
MAX_RECORD = 16 * 1024 * 1024
#: step keys in priority order (the first present wins)
STEP_KEYS = ("train/global_step", "global_step", "step")
_BOOKKEEPING = frozenset({"_step", "_runtime", "_timestamp"})
_INSTALL = "reading W&B run files needs the wandb package: pip install 'rlguard[wandb]'"


def record_class(path: str):
    """wandb's ``Record`` protobuf class, or a LogFormatError with the install hint."""
    try:
        from wandb.proto.wandb_internal_pb2 import Record
    except ImportError as exc:
        raise LogFormatError(f"{_INSTALL} ({exc})", path=str(path)) from None
    return Record


class WandbReader(Reader):
    """W&B ``.wandb`` transaction logs (history rows); see the module docstring."""

    name = "wandb"
    summary = "W&B run file (wandb/run-*/run-<id>.wandb, offline runs too), history rows"
    follow = "append"

    @classmethod
    def sniff(cls, head: str, path: str) -> bool:
        return head.startswith(":W&B")

    def records(self, path: str) -> Iterator[LogRecord]:
        self.stats = stats = ReadStats()
        rows = _Rows(record_class(path), stats)
        with open_binary(path) as f, reading(path, stats):
            scan = _Scanner(f, path, stats, offset=0)
            for n, payload in scan:
                rec = rows.parse(n, payload)
                if rec is not None:
                    yield rec

    def read_appended(self, data: bytes, path: str, first_unit: int, context: dict) -> Appended:
        """Complete records at the start of ``data`` (bytes from ``context["offset"]``, 0 at
        first); a record being written, and the bytes after it, wait."""
        self.stats = stats = ReadStats()
        rows = _Rows(record_class(path), stats)
        rows.resume(context)
        start = int(context.get("offset", 0))
        scan = _Scanner(io.BytesIO(data), path, stats, offset=start, tailing=True,
                        skipping=bool(context.get("skipping")), first=first_unit - 1)
        records = [rec for n, payload in scan if (rec := rows.parse(n, payload)) is not None]
        ctx = {"offset": scan.consumed, "skipping": scan.skipping, **rows.context()}
        return Appended(records, scan.consumed - start, scan.units, stats.bad_lines + stats.bad_values, ctx)


class _Scanner:
    """Iterates ``(record number, payload)`` over the complete records of a transaction log.

    ``f`` holds the log from absolute offset ``offset`` on (the block structure is absolute).
    Afterwards ``consumed`` is the absolute offset after the last complete unit (record,
    padding, damaged chunk) and ``units`` how many records (good or damaged) that covered.
    """

    def __init__(self, f: IO[bytes], path: str, stats: ReadStats, *, offset: int, tailing: bool = False,
                 skipping: bool = False, first: int = 0) -> None:
        self.f, self.path, self.stats, self.tailing = f, path, stats, tailing
        self.pos = self.consumed = offset
        self.skipping = skipping  # inside a record too large to keep: drop chunks to its LAST
        self.units, self.first = 0, first

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        if self.pos == 0 and not self._header():
            return
        pending: list[bytes] | None = None  # the chunks so far of a record split over blocks
        size = 0
        while (chunk := self._chunk(pending is not None)) is not None:
            kind, data = chunk
            if kind == 0:  # damaged: what was pending is lost with it
                pending = None
            elif kind in (_FULL, _FIRST):
                if pending is not None:
                    self._bad("record cut off by a new one (its LAST chunk is missing)")
                self.skipping, pending = False, None
                if kind == _FULL:
                    yield self._complete(data)
                else:
                    pending, size = [data], len(data)
            elif pending is None:  # MIDDLE/LAST of a record skipped or never started
                if not self.skipping:
                    self._bad(f"chunk of type {kind} outside a record")
                self.skipping = self.skipping and kind == _MIDDLE
                self.consumed = self.pos
            else:
                pending.append(data)
                size += len(data)
                if size > MAX_RECORD:
                    self._bad(f"record larger than {MAX_RECORD >> 20} MiB skipped")
                    pending, self.skipping, self.consumed = None, kind == _MIDDLE, self.pos
                elif kind == _LAST:
                    payload, pending = b"".join(pending), None
                    yield self._complete(payload)

    def _chunk(self, pending: bool) -> tuple[int, bytes] | None:
        """The next chunk as ``(type, data)``; type 0 for a damaged one (counted here); None
        where the data ends (``pending``: inside a record)."""
        while True:
            left = _BLOCK - self.pos % _BLOCK
            if left >= _CHUNK:
                break
            if len(self.f.read(left)) < left:  # block trailer
                return self._cut(pending)
            self.pos += left
            if not pending:
                self.consumed = self.pos
        head = self.f.read(_CHUNK)
        if len(head) < _CHUNK:
            return self._cut(bool(head) or pending)
        crc, length, kind = struct.unpack("<IHB", head)
        if not _FULL <= kind <= _LAST or _CHUNK + length > left:  # drop the rest of the block
            if len(self.f.read(left - _CHUNK)) < left - _CHUNK:
                return self._cut(True)  # a follower waits for the whole block
            self._bad(f"damaged chunk header (type {kind}, length {length}); rest of the block skipped")
            self.pos += left
            # chunks of a record begun in the lost part are dropped uncounted
            self.skipping, self.consumed = True, self.pos
            return 0, b""
        data = self.f.read(length)
        if len(data) < length:
            return self._cut(True)
        self.pos += _CHUNK + length
        if zlib.crc32(data, _SEED[kind]) != crc:
            self._bad(f"chunk checksum mismatch (type {kind}, {length} bytes)")
            # the chunks left of a record whose part is lost are dropped without a count
            self.skipping, self.consumed = kind in (_FIRST, _MIDDLE), self.pos
            return 0, b""
        return kind, data

    def _header(self) -> bool:
        head = self.f.read(len(HEADER))
        if len(head) < len(HEADER) and HEADER.startswith(head):
            self._cut(bool(head))  # the file is being created
            return False
        if head != HEADER:
            raise LogFormatError(f"not a W&B run file: it starts with {short(head)}, not {short(HEADER)}",
                                 path=str(self.path), line=1)
        self.pos = self.consumed = len(HEADER)
        return True

    def _complete(self, payload: bytes) -> tuple[int, bytes]:
        self.units += 1
        self.consumed = self.pos
        self.stats.lines = self.units
        return self.first + self.units, payload

    def _bad(self, reason: str) -> None:
        self.units += 1
        self.stats.lines = self.units
        note_bad(self.stats, self.first + self.units, reason)

    def _cut(self, partial: bool) -> None:
        """The data ends; ``partial``: inside a record (a follower just waits for the rest)."""
        if partial and not self.tailing:
            self.stats.warnings.append("the last record is incomplete (the run is still writing?); "
                                       "the records before it are kept")


class _Rows:
    """History records -> LogRecords (steps, names, values as the module docstring says)."""

    def __init__(self, record_cls, stats: ReadStats) -> None:
        self.record_cls, self.stats = record_cls, stats
        self.seen_step, self.prev = False, 0

    def resume(self, context: dict) -> None:
        self.seen_step, self.prev = bool(context.get("seen_step")), int(context.get("prev", 0))

    def context(self) -> dict:
        return {"seen_step": self.seen_step, "prev": self.prev}

    def parse(self, n: int, payload: bytes) -> LogRecord | None:
        rec = self.record_cls()
        try:
            rec.ParseFromString(payload)
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
            note_bad(self.stats, n, f"record does not decode: {exc}")
            return None
        if rec.WhichOneof("record_type") != "history":
            return None
        metrics, steps, own_step = self._items(rec.history, n)
        step = next((steps[k] for k in STEP_KEYS if k in steps), None)
        if step is not None:
            self.seen_step = True
        elif self.seen_step:
            step = self.prev
        else:
            step = own_step if own_step is not None else rec.history.step.num
        self.prev = step
        if not metrics:
            return None
        self.stats.records += 1
        return LogRecord(step, metrics, n)

    def _items(self, history, n: int) -> tuple[dict[str, float], dict[str, int], int | None]:
        """(metrics, step keys, W&B's ``_step``) of one history row. Hot: one pass of float()
        over the items; the rare rest (strings, media, bookkeeping) is sorted out after."""
        metrics: dict[str, float] = {}
        others: list[tuple[str, str]] = []
        hidden = False  # a key starting with "_": W&B bookkeeping
        for item in history.item:
            key = item.key
            if not key:
                nested = item.nested_key
                key = nested[0] if len(nested) == 1 else ".".join(nested)
            text = item.value_json
            hidden = hidden or key[:1] == "_"
            try:  # JSON numbers, NaN and +-Infinity; strings, objects, true/null raise
                metrics[key] = float(text)
            except ValueError:
                others.append((key, text))
        own_step = None
        if hidden:
            own_step = to_step(metrics.get("_step"))
            for key in [k for k in metrics if k in _BOOKKEEPING or k.startswith("_wandb")]:
                del metrics[key]
            others = [(k, t) for k, t in others if not k.startswith("_wandb")]
        if others:
            self._others(others, metrics, n)
        if REWARD_BLANK not in metrics and (REWARD_KEYS[0] in metrics or REWARD_KEYS[1] in metrics):
            metrics[REWARD_BLANK] = 0.0  # a reward was scored (the marker is 1.0 where it was blank)
        steps = {}
        for key in STEP_KEYS:
            step = to_step(metrics.get(key))
            if step is not None:
                steps[key] = step
                del metrics[key]
        return metrics, steps, own_step

    def _others(self, others: list[tuple[str, str]], metrics: dict[str, float], n: int) -> None:
        """Values that are not numbers: media objects (a ``<name>._type`` item; their numeric
        parts, an image's width, go too), JSON null and numeric strings (kept as JSONL keeps
        them), anything else counted."""
        media = tuple(key[:-5] for key, _ in others if key.endswith("._type"))
        if media:
            for key in [k for k in metrics if k.startswith(media)]:
                del metrics[key]
            for key in media:
                text = next(t for k, t in others if k == key + "_type")
                note_bad(self.stats, n, f"{key[:-1]!r} is a {short(text)} object, not a number", value=True)
        for key, text in others:
            if not (media and key.startswith(media)):
                self._other(key, text, metrics, n)

    def _other(self, key: str, text: str, metrics: dict[str, float], n: int) -> None:
        try:
            value = json.loads(text)
        except ValueError:
            note_bad(self.stats, n, f"value of {short(key)} is not JSON: {short(text)}", value=True)
            return
        if value is None and reward_family(key):  # TRL's blank reward: nothing was scored
            if key in REWARD_KEYS:
                metrics[REWARD_BLANK] = 1.0  # (its spread and per-function means: not logged)
        elif value is None or value.__class__ is str:
            json_metric(key, value, metrics, self.stats, n, NULL_NAN)
        else:
            note_bad(self.stats, n, f"value of {short(key)} is not a number: {short(text)}", value=True)



def run_title(path: str, max_records: int = 200) -> str | None:
    """The run's name as W&B shows it (``display_name``, else its id) from the ``run`` record
    near the start of ``path``; None when there is none or the file cannot be read."""
    try:
        cls = record_class(path)
        with open_binary(path) as f:
            for i, (_n, payload) in enumerate(_Scanner(f, path, ReadStats(), offset=0)):
                rec = cls()
                try:
                    rec.ParseFromString(payload)
                except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
                    continue
                if rec.WhichOneof("record_type") == "run":
                    return rec.run.display_name or rec.run.run_id or None
                if i >= max_records:
                    break
    except (OSError, LogFormatError):
        return None
    return None
