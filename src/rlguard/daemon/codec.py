"""Compact, lossless JSON for saved watchdog state.

A run's state is mostly detector tails: lists of up to a few hundred floats. Written as JSON
text each float costs ~19 characters and a ``repr``; a daemon with 1,000 runs spent about a
fifth of its CPU there. :func:`pack` replaces every all-float list of at least ``MIN_LEN``
items with ``{"f64": <base64 of the little-endian float64 bytes>}`` (NaN and infinities kept
bit for bit); :func:`unpack` undoes it. States saved before this encoding hold plain lists
and load unchanged.

:func:`encode` is the daemon's way (its saves and handoff records): the watchdog's state with
its long series left as numpy arrays (``Watchdog.state_dict(arrays=True)``: the run's feeds and
recent values, most of its bytes), written by one ``json.dumps`` whose ``default`` packs each
float array as :func:`pack` would. No walk over the state first and no float list built only
to be packed: half the CPU of ``json.dumps(pack(state))`` (``bench/run_footprint.py``). Lists
stay plain JSON lists; :func:`unpack` reads both.
"""
from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

MIN_LEN = 16
_TAG = "f64"
_FLOAT = {float}
_CONTAINERS = (dict, list)


def pack(obj: Any) -> Any:
    """``obj`` with its long all-float lists packed. What holds nothing to pack (a list of
    scalars) is returned as it is, not copied: the result is for ``json.dumps`` at once."""
    if isinstance(obj, dict):  # (scalars are kept without a call: most of a state's values)
        return {k: pack(v) if isinstance(v, _CONTAINERS) else v for k, v in obj.items()}
    if isinstance(obj, list):
        types = set(map(type, obj))  # one C-level pass, not a Python call per item
        if len(obj) >= MIN_LEN and types == _FLOAT:
            return {_TAG: base64.b64encode(np.asarray(obj, dtype="<f8").tobytes()).decode("ascii")}
        if not any(issubclass(t, _CONTAINERS) for t in types):
            return obj
        return [pack(v) if isinstance(v, _CONTAINERS) else v for v in obj]  # (a rule's state: 8 scalars, 1 dict)
    return obj


def unpack(obj: Any) -> Any:
    if isinstance(obj, dict):
        if len(obj) == 1 and _TAG in obj and isinstance(obj[_TAG], str):
            raw = base64.b64decode(obj[_TAG].encode("ascii"), validate=True)
            if len(raw) % 8:
                raise ValueError("a packed float list whose length is not a multiple of 8 bytes")
            return np.frombuffer(raw, dtype="<f8").tolist()
        return {k: unpack(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unpack(v) for v in obj]
    return obj


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
