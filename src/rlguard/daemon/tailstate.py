"""What a followed log's tail remembers (saved by the daemon after each poll) and what one poll
returns. The cursor (path, inode, offset, anchors) is :mod:`.tail`'s; the stream identity
(first and last record seen, steps judged) is :mod:`.stream`'s."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..sources.base import LogRecord

ANCHOR = 512  # bytes hashed at the start of the file and just before the offset


@dataclass
class TailState:
    path: str | None = None  # the file followed now (a run may move on to a newer one)
    inode: int | None = None
    offset: int = 0  # bytes consumed (complete units only)
    line: int = 0  # units (lines, TFRecords) consumed
    fmt: str | None = None
    context: dict = field(default_factory=dict)  # the reader's own (CSV header, step count...)
    size: int = 0
    mtime: int = 0  # ns
    changed_at: float = 0.0  # wall time a poll last saw the file change (size, mtime, inode)
    sig: list | None = None  # "whole" formats: signature at the last read
    head: str | None = None  # hash of the first min(offset, ANCHOR) bytes
    anchor: str | None = None  # hash of the min(offset, ANCHOR) bytes before the offset
    missing: bool = False
    more: bool = False  # the last read stopped at max_bytes: more is waiting
    compressed: bool | None = None  # gzip: followed by whole re-reads
    reread: bool = False  # reading from the top again: deliver only what was not judged
    # the stream (what was judged): survives re-reads and moves to another file
    first: str | None = None  # fingerprint of the stream's first record
    first_step: int | None = None
    count: int = 0  # records of the stream seen (delivered or skipped)
    last: str | None = None  # fingerprint of the stream's last record seen
    last_step: int | None = None  # step of the last record delivered
    # during a re-read (see stream.StreamFilter): same | exact | after | new; records read so
    # far, how many the stream had before, and the last step judged before
    mode: str | None = None
    index: int = 0
    skip: int = 0
    floor: int | None = None
    resume_floor: int | None = None  # steps up to this one were judged: a resumed run's again

    @property
    def fresh(self) -> bool:
        """Nothing read yet, nothing saved: the first poll of a run this daemon never saw."""
        return self.inode is None and self.count == 0 and self.first is None and not self.reread


@dataclass
class Poll:
    records: list[LogRecord] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # rotated, truncated, rewritten, new run...
    bytes: int = 0
    skipped: int = 0
    bad: int = 0  # units or values that could not be used
    error: str | None = None


def fingerprint(rec: LogRecord) -> str:
    key = repr((rec.step, sorted(rec.metrics.items())))
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()
