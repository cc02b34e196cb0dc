"""W&B transaction logs written the way ``wandb`` writes them, for the tests and the reader fuzz
harness (``bench/fuzz_readers.py``): rlguard only reads them (:mod:`rlguard.sources.wandb_run`)."""
from __future__ import annotations

import json
import struct
import zlib


def frame(records: list[bytes]) -> bytes:
    """The file header, then each serialized record in LevelDB-log framing: 32 KiB blocks, a
    record split into FIRST/MIDDLE/LAST chunks where it crosses a block, a block end with less
    room than a chunk header (7 bytes) padded with zeros."""
    from rlguard.sources.wandb_run import HEADER

    out = bytearray(HEADER)
    for payload in records:
        first = True
        while True:
            left = 32768 - len(out) % 32768
            if left < 7:
                out += bytes(left)
                continue
            part, payload = payload[: left - 7], payload[left - 7:]
            kind = (1 if not payload else 2) if first else (4 if not payload else 3)
            out += struct.pack("<IHB", zlib.crc32(part, zlib.crc32(bytes([kind]))), len(part), kind) + part
            first = False
            if not payload:
                break
    return bytes(out)


def history(step: int, **values) -> bytes:
    """One W&B history record (a logged step: ``values`` and ``train/global_step``), serialised
    with wandb's own protobuf class (the wandb extra)."""
    from wandb.proto.wandb_internal_pb2 import Record

    rec = Record()
    for key, value in {**values, "train/global_step": step}.items():
        item = rec.history.item.add()
        item.nested_key.append(key)
        item.value_json = json.dumps(value)
    return rec.SerializeToString()
