"""Statistics of a metric's stream, kept apart from the decisions that read them.

Every statistic here has two forms that give the same numbers: a batch function over a whole
array (``rlguard check`` replays a log as one chunk) and an incremental object updated one
value at a time (a live run, a daemon tailing a file), amortised O(log w) per value or
better. Detectors read these; the thresholds and decisions stay in ``rlguard.detectors``.

- :mod:`.order`: rolling (upper) median over a window, batch and incremental (sorted window);
  median, MAD and quantiles of a short window from one sort of a plain list (``sorted_*``).
- :mod:`.robust`: robust noise, 1.4826 x MAD (of values, of differences, of block means), an
  evaluation's noise, and the spread of past two-segment shifts.
- :mod:`.split`: the l2-optimal single split of a segment (what ruptures' KernelCPD gives).
- :mod:`.running`: running peak / lowest value with its position, EWMA and EW variance, streaks.
- :mod:`.shared`: one evaluation's statistics, computed once and read by every rule that asks
  for the same one (keyed by the exact input, so sharing changes no number).

Why not River (``river.stats.RollingQuantile``, ``river.stats.EWMean``/``EWVar``), measured
by ``bench/river_compare.py`` (river 0.26.1, 100,000 Student-t values, window 30):

- one value at a time, River's compiled rolling quantile is 2x faster than
  :class:`RollingMedian` (0.30 against 0.60 us a value), but its median of an even window is
  not numpy's bit for bit (it differs in the last bit in 9% of windows): the rules' medians
  must be the same numbers online and offline (the online/batch property), so River's could
  not stand in for them; EW mean and variance: River 0.47, :class:`EWStats` 0.34 us a value;
- River has no batch form: a replay (``rlguard check``) would pay one Python call per value
  and statistic, where :func:`rolling_median` costs 0.15 us a value (2x less than River's loop);
- River has no rolling MAD (the spike rules' noise): a second quantile of ``|x - median|``
  is not the same statistic;
- it would bring a compiled dependency, with pandas and scipy, into a monitor core that
  keeps to numpy, pydantic and PyYAML.
"""
from .order import (SMALL, RollingMedian, lower_median, median, median_rows, quantile_lerp, quantile_ranks, ranked, rolling_median,
    sorted_finite, sorted_mad, sorted_median, sorted_quantile, sorted_unique, upper_median, upper_median_rows,
    window_max, windows)
from .robust import (MAD_TO_SIGMA, MIN_BLOCKS, block_noise, block_noise_loop, eval_noise, mad_sigma, median_mad, median_mad_rows,
    past_shifts_sd, robust_sigma_of_diffs, robust_sigma_of_diffs_rows, trailing_mean_se, latest_finite)
from .running import EWStats, RunningLow, RunningPeak, Streak, ewm, running_low, running_peak, streaks
from .shared import shared_rolling_median, sharing
from .split import best_split_l2

__all__ = ["SMALL", "RollingMedian", "lower_median", "median", "median_rows", "quantile_lerp", "quantile_ranks", "ranked", "rolling_median",
           "sorted_finite", "sorted_mad", "sorted_median", "sorted_quantile", "sorted_unique", "upper_median",
           "upper_median_rows", "window_max", "windows",
           "MAD_TO_SIGMA", "MIN_BLOCKS", "block_noise", "block_noise_loop", "eval_noise", "mad_sigma", "median_mad",
           "median_mad_rows", "past_shifts_sd", "robust_sigma_of_diffs", "robust_sigma_of_diffs_rows",
           "trailing_mean_se", "latest_finite", "best_split_l2", "EWStats", "RunningLow", "RunningPeak", "Streak", "ewm", "running_low", "running_peak",
           "streaks",
           "shared_rolling_median", "sharing"]
