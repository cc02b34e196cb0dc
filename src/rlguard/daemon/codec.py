"""Compact, lossless JSON for saved watchdog state.

A run's state is mostly series of floats (its feeds and recent values: up to a few thousand).
Written as JSON text each float costs ~19 characters and a ``repr``; a daemon with 1,000 runs
spent about a fifth of its CPU there. :func:`encode` writes the state with its long series
left as numpy arrays (``Watchdog.state_dict(arrays=True)``) in one ``json.dumps``, whose
``default`` replaces each float array of at least ``MIN_LEN`` values with ``{"f64": <base64 of
the little-endian float64 bytes>}`` (NaN and infinities kept bit for bit) as it meets it: no
walk over the state, no float list built only to be packed (the walk over lists that came
before took twice the CPU: ``bench/run_footprint.py``). Lists stay plain JSON lists.
:func:`decode` parses and undoes it; states saved as plain lists, or by the list walk, load unchanged.
"""
from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

MIN_LEN = 16
_TAG = "f64"


def decode(text: str | bytes) -> Any:
    """The object of JSON ``text`` written by :func:`encode`, its packed float lists back as
    lists. Each dict is looked at once, as the parser builds it (``object_hook``), and lists
    are not walked: the walk over the parsed state that came before visited every number of
    every run's state (a third of the CPU of building a restarted daemon's runs from 2,000 saved
    states, under cProfile; ``bench/daemon_restart.py`` times the restart)."""
    return json.loads(text, object_hook=_unpacked)


def _unpacked(d: dict) -> Any:
    if len(d) == 1:
        packed = d.get(_TAG)
        if isinstance(packed, str):
            raw = base64.b64decode(packed.encode("ascii"), validate=True)
            if len(raw) % 8:
                raise ValueError("a packed float list whose length is not a multiple of 8 bytes")
            return np.frombuffer(raw, dtype="<f8").tolist()
    return d


def encode(obj: Any, compact: bool = False) -> str:
    """``obj`` as JSON text, its numpy arrays packed (float ones of at least ``MIN_LEN``
    values as base64 float64, the others as lists); NaN and infinities allowed, as in a state."""
    return json.dumps(obj, allow_nan=True, default=_array, separators=(",", ":") if compact else None)


def _array(obj: Any) -> Any:
    if isinstance(obj, np.ndarray) and obj.ndim == 1:
        if obj.dtype.kind == "f" and len(obj) >= MIN_LEN:
            return {_TAG: base64.b64encode(obj.astype("<f8", copy=False).tobytes()).decode("ascii")}
        return obj.tolist()
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")
