"""What is new in a followed log: re-reads never replay.

Whenever a log has to be read again from the top - it was replaced by rename (a new inode),
truncated, rewritten in place, deleted and recreated, re-read whole, the run moved on to
another file (a newer ``checkpoint-N``, a new TensorBoard file), or the stream began in a
rotated predecessor (:mod:`.rotated`) - records are classified against the stream already
judged:

* the same stream (its first record is the one seen before): records already delivered are
  skipped by count when the record at that count is the one delivered last, else only steps
  after the last one delivered are new;
* a new run in the same place (a different first record whose step is not after the first
  step seen: the steps start over): everything is new, and the event says so;
* a continuation (rotation to a fresh file, a run resumed from a checkpoint): only steps
  after the last one delivered are new. Steps that a resumed run does again are not judged
  twice.
"""
from __future__ import annotations

from ..sources.base import LogRecord
from .tailstate import Poll, TailState, fingerprint


class StreamFilter:
    """Decides which records of a poll are delivered; its state is the tail's (saved), plus the
    records of a re-read not yet proven judged (``held``, in memory for the re-read only)."""

    def __init__(self) -> None:
        self.held: list[LogRecord] = []
        self._last: LogRecord | None = None  # the last record seen, not yet fingerprinted

    def settle(self, st: TailState) -> None:
        """Write ``st.last``, the fingerprint of the last record seen. A live poll only keeps
        the record (a fingerprint is a sorted repr and a hash, about 20 us): it is computed
        when something reads it, i.e. when the state is saved or a re-read compares with it."""
        if self._last is not None:
            st.last, self._last = fingerprint(self._last), None

    def deliver(self, st: TailState, records: list[LogRecord], out: Poll, done: bool) -> list[LogRecord]:
        if st.reread:
            self.settle(st)
            if records and st.mode is None:
                self._classify(st, records[0], out)
            kept = self._filter(st, records) if records else []
            if done and st.mode is not None:
                if st.mode == "same":  # it ended before the records judged: a resume, say
                    kept.extend(self.held)
                    st.resume_floor = st.floor
                self.held = []
                st.count, st.reread, st.mode = st.index, False, None
        else:
            kept = records
            if records:
                if st.first is None:
                    st.first, st.first_step = fingerprint(records[0]), records[0].step
                st.count += len(records)
                last = records[-1]  # st.last, once settled; a copy: the run monitor may
                self._last = LogRecord(last.step, dict(last.metrics), last.line)  # drop keys later
        if st.resume_floor is not None and kept:
            # a resumed run does steps again: judged from the first step after the last one
            # judged; once past it, its steps are taken as they come
            past = next((k for k, rec in enumerate(kept) if rec.step > st.resume_floor), None)
            if past is None:
                kept = []
            else:
                kept, st.resume_floor = kept[past:], None
        if kept:
            st.last_step = kept[-1].step
        return kept

    def _classify(self, st: TailState, rec: LogRecord, out: Poll) -> None:
        st.index, st.skip, st.floor = 0, st.count, st.last_step
        self.held = []
        if st.first is None or fingerprint(rec) == st.first:
            st.mode = "same"  # the stream read again: skip what it had, verified by count
            return
        if st.first_step is not None and rec.step <= st.first_step:
            out.events.append(f"a new run in the same place (its steps start over at {rec.step})")
            st.mode, st.resume_floor = "new", None
        else:  # rotation to a fresh file, or a resumed run: steps after the last one judged
            st.mode, st.resume_floor = "new", st.floor
        st.first, st.first_step, st.skip = fingerprint(rec), rec.step, 0

    def _filter(self, st: TailState, records: list[LogRecord]) -> list[LogRecord]:
        """Records of a re-read that were not delivered before (see the module docstring)."""
        kept: list[LogRecord] = []
        for rec in records:
            i = st.index
            st.index += 1
            if st.mode == "new" or (st.mode == "exact" and i >= st.skip):
                kept.append(rec)
            elif st.mode == "same":
                if i == st.skip - 1:
                    if fingerprint(rec) == st.last:
                        st.mode = "exact"  # verified: what follows is new
                    else:  # rewritten with other content: only later steps are new
                        st.mode, st.resume_floor = "new", st.floor
                        kept.extend(self.held)
                        kept.append(rec)
                    self.held = []
                elif st.floor is None or rec.step > st.floor:
                    self.held.append(rec)  # judged before, unless the stream proves otherwise
        st.last = fingerprint(records[-1])
        return kept
