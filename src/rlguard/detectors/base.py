"""The detector interface: one abstract method, run online on chunks of a metric's series.

A detector sees one metric of one run, in arrival order, a chunk at a time: ``scan`` takes
the new samples and returns, for each, a verdict (1 triggered, 0 fine, -1 no opinion: not
enough history, or a value too coarsely printed to decide), the statistic it judged and the
reference it compared with. Online use is a chunk of one sample; replaying a log is one big
chunk, vectorized with numpy. Both paths are the same code, so they cannot disagree.

Detectors keep only bounded state (a tail of recent values, a few scalars) so a watchdog
that runs for months does not grow, and that state is plain JSON for save/restore.
Persistence (``for``), warm-up, guards and cool-down are the rule engine's job, not the
detector's.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..stats import median_rows, robust_sigma_of_diffs, rolling_median, upper_median, windows
from ..stats import SMALL, quantile_lerp, quantile_ranks, ranked, shared_rolling_median  # noqa: F401 (SMALL re-exported)
from ..core.numfmt import fmt  # noqa: F401 (re-exported: the detectors' messages use it)

TRIGGERED, FINE, UNKNOWN = 1, 0, -1


class Params(BaseModel):
    """Base of every detector's parameter model: unknown parameters are errors. Each model's
    validator is built when first used (``defer_build``): a check builds only those of the
    detectors its rules run, not all 22 at import."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


@dataclass(slots=True)
class Chunk:
    """New samples of one metric. ``quantum`` is the printed resolution (0 when exact).

    ``other`` is, for two-metric detectors, the companion metric's smoothed value (mean of its
    last few samples) as of each sample (NaN where it was not logged yet), and ``other_se`` the
    standard error of that mean (0 when it rests on one sample).
    """

    steps: np.ndarray
    values: np.ndarray
    quantum: float = 0.0
    other: np.ndarray | None = None
    other_se: np.ndarray | None = None


@dataclass(slots=True)
class Scan:
    verdict: np.ndarray  # int8
    stat: np.ndarray  # float64
    ref: np.ndarray  # float64
    ref_step: np.ndarray | None = None  # int64, step the reference comes from (peak, best...)
    level: np.ndarray | None = None  # float64, the value judged when it is not the raw sample


class Detector(ABC):
    """Subclasses set ``name``, ``Params``, implement :meth:`scan` and :meth:`describe`."""

    name: ClassVar[str]
    Params: ClassVar[type[Params]]
    #: False: the engine only passes finite values (non-finite samples get no opinion).
    wants_nonfinite: ClassVar[bool] = False
    #: name of the params field naming a companion metric, for two-metric detectors
    companion_param: ClassVar[str | None] = None
    #: False: the detector reads the companion's value only, not its noise (``Chunk.other_se``)
    companion_noise: ClassVar[bool] = True
    #: True when ``ref_step`` is the step of the metric's best value (the checkpoint to keep)
    ref_is_best: ClassVar[bool] = False
    #: attributes (``tail``, ``tail_steps``) the watchdog may lend from the metric's shared
    #: feed (:mod:`rlguard.engine.feeds`): only where, after every scan, they hold a suffix of what
    #: they held plus the values (steps) scanned
    lent: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: Params) -> None:
        self.p = params

    @abstractmethod
    def scan(self, chunk: Chunk) -> Scan:
        """Judge each new sample; update the bounded state."""

    def advance(self, chunk: Chunk) -> bool:
        """Take in a chunk none of whose samples can be judged (the rule's guards mute them
        all: a DPO rule on a GRPO run, whose guard metric is never logged; or the detector is
        :meth:`blind` to it), leaving the state a :meth:`scan` would leave, without judging;
        False (the default) where the detector cannot, and the engine scans. It never reads
        the companion series (a blind chunk comes without one)."""
        return False

    def blind(self, n: int, held: int) -> bool:
        """Whether none of the next ``n`` samples can be judged, whatever their values: too
        little history yet (a warm-up), or past the records the detector judges. ``held``: how
        many values its tail holds now (lent by the feed during a scan only, so the engine
        counts them). True only where :meth:`advance` takes such a chunk in: the engine then
        skips the rule for the chunk, guards, scan and life cycle, as all of it would be "no
        opinion" (a young run's first records meet a dozen rules still warming up). Counts
        only, never values: fewer samples than ``n`` (the engine drops non-finite ones) are
        blind too. False (the default): the engine scans."""
        return False

    def settle(self, values: np.ndarray, lo: float, hi: float, quantum: float) -> int | None:
        """Take in a chunk of finite ``values``, all within ``[lo, hi]`` (printed at
        ``quantum``), where that range (and the detector's own state: its tail is lent, as for
        a scan) shows the verdict of every sample without judging each, leaving the state a
        :meth:`scan` would leave, and return that verdict: FINE for all, or UNKNOWN for all;
        None (the default: nothing taken in) where it does not show one, or the detector cannot
        tell from a range, and the engine scans. The range is the metric's (``Column.span``),
        computed once for all its rules: a healthy record, far from a bound, is then judged by
        a comparison or two per rule instead of a scan per rule. A bound from the range may be
        loose (None where a scan might still find all fine), never wrong."""
        return None

    @abstractmethod
    def describe(self, metric: str, value: float, stat: float, ref: float,
                 ref_step: int | None) -> str:
        """The human reason for a triggered sample."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        pass


DETECTORS: dict[str, type[Detector]] = {}


# SMALL (imported above: :data:`rlguard.stats.order.SMALL`, the one "live chunk" cut-off): a
# chunk of at most this many records is judged sample by sample in plain floats by the
# detectors with such a path, a longer one (a replay) by their vectorized path; both give the
# same verdicts.


def register(cls: type[Detector]) -> type[Detector]:
    DETECTORS[cls.name] = cls
    return cls


# ---------------------------------------------------------------- shared numeric helpers
# (the statistics themselves live in rlguard.stats; these are re-exported for the detectors)

def quantile_rows(view: np.ndarray, qs: tuple[float, ...]) -> np.ndarray:
    """``np.quantile(view, qs, axis=1)`` (the default 'linear' method) for finite rows, bit for
    bit: one sort of the rows (or a partition at the needed ranks: ``ranked``) and numpy's
    own interpolation formula."""
    ranks = [quantile_ranks(q, view.shape[1]) for q in qs]
    part = ranked(view, sorted({r for a, b, _ in ranks for r in (a, b)}), axis=1)
    out = np.empty((len(qs), view.shape[0]))
    for i, (a, b, t) in enumerate(ranks):
        out[i] = quantile_lerp(part[:, a], part[:, b], t)
    return out


def rolling(x: np.ndarray, w: int, fn: str = "median", last: int | None = None) -> np.ndarray:
    """Statistic of the trailing window of ``w`` values ending at each of the ``last``
    positions of ``x`` (all positions by default); windows are partial at the very start.

    ``median`` is :func:`upper_median`, computed by :func:`rlguard.stats.rolling_median`
    (the same numbers for a replayed log and an online update, without scipy), computed once
    per evaluation for the rules that ask for the same one (:mod:`rlguard.stats.shared`)."""
    if fn == "median":
        return shared_rolling_median(x, w, last)
    n = len(x)
    last = n if last is None else min(last, n)
    out = np.empty(last)
    start = n - last  # first position wanted
    j = 0
    while start + j < min(w - 1, n) and j < last:  # partial windows
        out[j] = np.mean(x[: start + j + 1])
        j += 1
    if j < last:
        out[j:] = np.mean(windows(x[start + j - w + 1:], w), axis=1)
    return out


def nanmax(a: float, b: float) -> float:
    """``np.maximum`` of two floats: NaN if either is NaN (the detectors' plain-float paths)."""
    if a != a or b != b:
        return float("nan")
    return b if b > a else a


def least_magnitude(lo: float, hi: float) -> float:
    """The smallest ``|x|`` any value in ``[lo, hi]`` can have (0 where the range holds 0): a
    bound from below on the magnitude of a median or a mean of values in that range (the
    whole-chunk screens)."""
    return lo if lo > 0 else -hi if hi < 0 else 0.0


def extend_tail(tail: np.ndarray | list[float], values: np.ndarray) -> np.ndarray:
    """History (previous tail + new values) as one array."""
    if len(tail) == 0:
        return np.asarray(values, dtype=float)
    return np.concatenate([np.asarray(tail, dtype=float), values])


def keep_tail(hist: np.ndarray, n: int) -> np.ndarray:
    """The last ``n`` values, kept as an array (its own copy): the next chunk extends it
    without a list-to-array conversion; :func:`tail_list` gives the saved state's list."""
    return hist[-n:].copy() if n > 0 else np.empty(0)


def tail_list(tail: np.ndarray | list[float]) -> list[float]:
    """A kept tail as plain floats, for a JSON state."""
    return tail.tolist() if isinstance(tail, np.ndarray) else list(tail)
