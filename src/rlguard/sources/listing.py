"""Directory listings kept with the directory's mtime, for the daemon's polls.

Every poll asks each HF output dir and TensorBoard dir what to follow now (a newer checkpoint, a
new event file): three listings per run every two seconds, most of an idle poll's cost. A
directory's mtime changes whenever an entry is added, removed or renamed in it, so a listing is
read again only when the mtime moved: one ``stat`` instead of one ``listdir``.

What it assumes: a listing read within ``RACY_NS`` (2 s) of the directory's last change is not
trusted, and the next ask reads it again: on a file system with coarse mtimes (1 s, some network
mounts) an entry added in the same tick as the last change, after the listing, would leave the
mtime as it was. Clocks that disagree by more than that (a network server's against this
machine's) are not allowed for. Entry *contents* (a file rewritten in place) are not a listing's
business: callers still ``stat`` the files they compare.
"""
from __future__ import annotations

import os
import time

#: a listing this close to its directory's last change is read again at the next ask
RACY_NS = 2_000_000_000
#: directories kept (a daemon with 10,000 runs asks about ~30,000); past it, the cache starts again
LIMIT = 200_000


class Listings:
    """``names(d)``: the entries of directory ``d`` (a list the caller must not change), or
    None when it cannot be listed."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._held: dict[str, tuple[int, list[str]]] = {}  # dir -> (its mtime when listed, names)

    def names(self, d: str) -> list[str] | None:
        try:
            mtime = os.stat(d).st_mtime_ns  # before the listing: a change after it moves the mtime
        except OSError:
            self._held.pop(d, None)
            return None
        hit = self._held.get(d)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        try:
            names = os.listdir(d)
        except OSError:
            return None
        if time.time_ns() - mtime > RACY_NS:  # else: not trusted, read again next time
            if len(self._held) >= self.limit:
                self._held.clear()
            self._held[d] = (mtime, names)
        else:
            self._held.pop(d, None)
        return names


#: the process's listings (the daemon's polls and follow targets)
LISTINGS = Listings()
