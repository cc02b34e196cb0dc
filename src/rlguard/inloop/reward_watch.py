"""A watch on TRL-signature reward functions: what a callback never sees.

A callback reads the trainer's averages; a reward function sees every completion, its group,
its length and each component's reward. ``watch_rewards`` wraps the functions (one line)::

    watch = rlguard.watch_rewards([correct, fmt], num_generations=4)
    trainer = GRPOTrainer(..., reward_funcs=watch, callbacks=[RLGuardCallback(rewards=watch)])

or ``@rlguard.reward_watch(num_generations=4)`` on one function. How TRL (1.x,
``trl/trainer/grpo_trainer.py``) calls them, which the figures rely on:

* ``GRPOTrainer._calculate_rewards`` calls each function once per generation batch, all with the
  same objects: ``reward_func(prompts=prompts, completions=completions,
  completion_ids=completion_ids_list, **reward_kwargs)``; a None is made NaN after the call
  (``reward if reward is not None else torch.nan``), so only the function's own output tells
  None from NaN.
* ``RepeatSampler(mini_repeat_count=self.num_generations, ...)`` repeats each prompt
  ``num_generations`` times in a row, so consecutive ``num_generations`` completions of a call
  are one group; the trainer's ``rewards.view(-1, num_generations)`` groups them the same way.
* The total of a completion is ``(rewards_per_func * reward_weights).nansum(dim=1)``, NaN when
  every function returned None (``rewards[unscorable_mask] = torch.nan``); ``weights=`` gives
  the watch the same ``reward_weights`` (default 1 each).

Each rank's functions see its own completions; ``RLGuardCallback`` decides on rank 0's. A call
whose length is not a multiple of ``num_generations`` has no groups (its rewards still count).
The module imports no torch: rewards are Python or NumPy numbers.
"""
from __future__ import annotations

import functools
import inspect
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from ..rules.vocab import default_alias_table

logger = logging.getLogger("rlguard")

#: the prefix of every key the watch adds; ``frac_zero_std`` is the vocabulary's own alias
PREFIX = "rewards_watch/"


@dataclass
class Batch:
    """One generation batch as the functions saw it: rewards per function (None kept)."""
    prompts: list
    lengths: list[int]
    rewards: dict[str, list] = field(default_factory=dict)

    def totals(self, names: list[str], weights: Mapping[str, float]) -> list[float]:
        """TRL's total per completion: the weighted nansum, NaN when no function scored it."""
        out = []
        for i in range(len(self.lengths)):
            parts = [weights[n] * _num(self.rewards[n][i]) for n in names if n in self.rewards]
            finite = [p for p in parts if not math.isnan(p)]
            out.append(math.fsum(finite) if finite else math.nan)
        return out

    def group_spreads(self, names: list[str], weights: Mapping[str, float], size: int) -> list[float]:
        """Each group's population spread (max - min of its scored totals; NaN: fewer than 2)."""
        totals = self.totals(names, weights)
        if size < 2 or len(totals) % size:
            return []
        spreads = []
        for start in range(0, len(totals), size):
            scored = [t for t in totals[start:start + size] if not math.isnan(t)]
            spreads.append(max(scored) - min(scored) if len(scored) > 1 else math.nan)
        return spreads


class _Tally:
    """Counts over a stretch of batches: what ``metrics()`` and the summary line report."""

    def __init__(self) -> None:
        self.calls = self.groups = self.tied = self.completions = self.length = 0
        self.scored: dict[str, int] = {}
        self.nones: dict[str, int] = {}
        self.nans: dict[str, int] = {}
        self.pinned: dict[str, int] = {}
        self.mass: dict[str, float] = {}

    def add(self, batch: Batch, watch: "RewardWatch") -> None:
        self.calls += 1
        spreads = batch.group_spreads(watch.names, watch.weights, watch.num_generations)
        self.groups += len(spreads)
        self.tied += sum(1 for s in spreads if s <= watch.tolerance)
        self.completions += len(batch.lengths)
        self.length += sum(batch.lengths)
        for name, values in batch.rewards.items():
            numbers = [_num(v) for v in values]
            finite = [v for v in numbers if not math.isnan(v)]
            top = watch.ceiling_of(name)
            self.nones[name] = self.nones.get(name, 0) + sum(1 for v in values if v is None)
            self.nans[name] = self.nans.get(name, 0) + sum(1 for v in values if v is not None and math.isnan(_num(v)))
            self.scored[name] = self.scored.get(name, 0) + len(finite)
            self.pinned[name] = self.pinned.get(name, 0) + sum(1 for v in finite if top is not None and v >= top - watch.tolerance)
            self.mass[name] = self.mass.get(name, 0.0) + math.fsum(abs(watch.weights[name] * v) for v in finite)

    def metrics(self) -> dict[str, float]:
        if not self.calls:
            return {}
        out: dict[str, float] = {PREFIX + "calls": float(self.calls), PREFIX + "groups": float(self.groups)}
        if self.groups:
            out["frac_zero_std"] = self.tied / self.groups
        if self.completions:
            out[PREFIX + "completion_length"] = self.length / self.completions
        mass = math.fsum(self.mass.values())
        for name in self.nones:
            out[f"{PREFIX}{name}/none"] = float(self.nones[name])
            out[f"{PREFIX}{name}/nan"] = float(self.nans[name])
            if self.scored[name]:
                out[f"{PREFIX}{name}/at_ceiling"] = self.pinned[name] / self.scored[name]
            if mass > 0:
                out[f"{PREFIX}{name}/share"] = self.mass[name] / mass
        return out


class RewardWatch(list):
    """The wrapped reward functions (a list, as TRL's ``reward_funcs`` takes it) and their figures.

    ``num_generations``: the trainer's (consecutive completions of one prompt form a group).
    ``ceiling``: the best reward each function can give (a number for all, or by name); a function
    without one is judged against the highest reward it has returned so far.
    ``weights``: TRL's ``reward_weights`` (default 1 each), for the total and the shares.
    ``every``: a summary line through the ``rlguard`` logger every this many batches (0: never).
    ``keep``: how many recent batches stay readable in ``batches``.
    """

    def __init__(self, funcs: Iterable[Callable], num_generations: int, ceiling: float | Mapping[str, float] | None = None,
                 weights: Iterable[float] | None = None, every: int = 50, tolerance: float = 1e-6, keep: int = 64) -> None:
        funcs = list(funcs)
        if num_generations < 1:
            raise ValueError(f"num_generations must be 1 or more, not {num_generations}")
        self.names = _names(funcs)
        weights = [1.0] * len(funcs) if weights is None else [float(w) for w in weights]
        if len(weights) != len(funcs):
            raise ValueError(f"{len(weights)} weights for {len(funcs)} reward functions")
        self.weights = dict(zip(self.names, weights))
        unknown = set(ceiling) - set(self.names) if isinstance(ceiling, Mapping) else set()
        if unknown:
            raise ValueError(f"ceiling names {sorted(unknown)}, not among the functions {self.names}")
        self.num_generations, self.ceiling, self.every, self.tolerance = num_generations, ceiling, every, tolerance
        self.highest: dict[str, float] = {}
        self.batches: deque[Batch] = deque(maxlen=keep)
        self._open: tuple[int, Batch] | None = None
        self._window, self._line, self._closed = _Tally(), _Tally(), 0
        super().__init__(_wrap(f, n, self) for f, n in zip(funcs, self.names))

    def ceiling_of(self, name: str) -> float | None:
        if isinstance(self.ceiling, Mapping):
            if name in self.ceiling:
                return float(self.ceiling[name])
        elif self.ceiling is not None:
            return float(self.ceiling)
        return self.highest.get(name)

    def metrics(self) -> dict[str, float]:
        """The figures over the batches since the last call (empty when none came): the callback
        takes them once per logged record, as the trainer averages its own over the same window."""
        self._close()
        out, self._window = self._window.metrics(), _Tally()
        return out

    def seen(self, name: str, args: dict, rewards: list) -> None:
        """One function's rewards for one batch; the batch closes when every function reported."""
        completions = args.get("completions", ())
        if self._open is not None and (self._open[0] != id(completions) or name in self._open[1].rewards):
            self._close()
        if self._open is None:
            ids = args.get("completion_ids")
            lengths = [len(c) for c in ids] if ids is not None else [_text_length(c) for c in completions]
            self._open = (id(completions), Batch(list(args.get("prompts", ())), lengths))
        batch = self._open[1]
        if len(rewards) != len(batch.lengths):  # TRL raises on it; the watch only skips it
            return
        batch.rewards[name] = list(rewards)
        finite = [v for v in map(_num, rewards) if not math.isnan(v)]
        if finite:
            self.highest[name] = max(finite + ([self.highest[name]] if name in self.highest else []))
        if len(batch.rewards) == len(self.names):
            self._close()

    def _close(self) -> None:
        if self._open is None:
            return
        batch, self._open = self._open[1], None
        self.batches.append(batch)
        self._window.add(batch, self)
        self._line.add(batch, self)
        self._closed += 1
        if self.every and self._closed % self.every == 0:
            logger.warning("rlguard: %s", self.summary_line(self._line))
            self._line = _Tally()

    def summary_line(self, tally: _Tally) -> str:
        """What the watch saw over ``tally``'s batches, in one line."""
        figures = tally.metrics()
        parts = [f"rewards over {tally.calls} batches, {tally.completions} completions"]
        if tally.groups:
            parts.append(f"{tally.tied}/{tally.groups} groups with zero reward variance ({figures['frac_zero_std']:.0%})")
        pinned = []
        for name in self.names:
            at = figures.get(f"{PREFIX}{name}/at_ceiling")
            top = self.ceiling_of(name)
            if at is not None and top is not None:
                pinned.append(f"{name} {at:.0%} (of {top:g})")
        if pinned:
            parts.append("at ceiling: " + ", ".join(pinned))
        shares = [f"{n} {figures[f'{PREFIX}{n}/share']:.0%}" for n in self.names if f"{PREFIX}{n}/share" in figures]
        if len(shares) > 1:
            parts.append("share of total: " + ", ".join(shares))
        blanks = [f"{n} {tally.nones.get(n, 0)} None, {tally.nans.get(n, 0)} NaN" for n in self.names
                  if tally.nones.get(n, 0) or tally.nans.get(n, 0)]
        parts.append("unscored: " + ("; ".join(blanks) if blanks else "none"))
        if tally.completions:
            parts.append(f"mean completion length {tally.length / tally.completions:.1f}")
        return "; ".join(parts)


def watch_rewards(funcs: Callable | Iterable[Callable], num_generations: int, **options: Any) -> RewardWatch:
    """The reward functions, wrapped: pass the result as ``reward_funcs`` and to
    ``RLGuardCallback(rewards=...)``. Options are :class:`RewardWatch`'s."""
    return RewardWatch([funcs] if callable(funcs) else funcs, num_generations, **options)


def reward_watch(func: Callable | None = None, *, num_generations: int = 1, **options: Any):
    """A decorator: ``@reward_watch(num_generations=4)`` (or bare, without groups). The function
    keeps its name and signature and gains ``.watch`` (its :class:`RewardWatch`) and ``.metrics``."""
    def decorate(f: Callable) -> Callable:
        watch = RewardWatch([f], num_generations, **options)
        wrapped = watch[0]
        wrapped.watch, wrapped.metrics = watch, watch.metrics
        return wrapped
    return decorate(func) if func is not None else decorate


def watched_metrics(rewards: Any, logged: Iterable[str] = ()) -> dict[str, float]:
    """The figures of a watch, a decorated function, or a list of them (the first key wins), for
    a record that logged the keys ``logged``. Where the trainer logged a zero-variance share of
    its own (TRL's ``frac_reward_zero_std``: over every rank's completions, where the watch sees
    one rank's), the watch's goes under ``rewards_watch/frac_zero_std``, read by no rule: an
    exact ``frac_zero_std`` would otherwise take the vocabulary's place from the trainer's."""
    out = _figures(rewards)
    if "frac_zero_std" in out and set(logged) & set(default_alias_table().canonical["frac_zero_std"].aliases):
        out[PREFIX + "frac_zero_std"] = out.pop("frac_zero_std")
    return out


def _figures(rewards: Any) -> dict[str, float]:
    if rewards is None:
        return {}
    if hasattr(rewards, "metrics"):
        return rewards.metrics()
    out: dict[str, float] = {}
    for item in rewards:
        for key, value in _figures(item).items():
            out.setdefault(key, value)
    return out


def _wrap(func: Callable, name: str, watch: RewardWatch) -> Callable:
    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def async_watched(*args, **kwargs):
            rewards = await func(*args, **kwargs)
            watch.seen(name, _named(func, args, kwargs), rewards)
            return rewards
        return async_watched

    @functools.wraps(func)
    def watched(*args, **kwargs):
        rewards = func(*args, **kwargs)
        watch.seen(name, _named(func, args, kwargs), rewards)
        return rewards
    return watched


def _named(func: Callable, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by name (TRL passes keywords; a direct call may pass them in order)."""
    if not args:
        return kwargs
    return {**dict(zip(("prompts", "completions"), args)), **kwargs}


def _names(funcs: list[Callable]) -> list[str]:
    """TRL's names (``get_callable_name``: a partial's function, else ``__name__``, else the class)."""
    names = []
    for f in funcs:
        while isinstance(f, functools.partial):
            f = f.func
        names.append(getattr(f, "__name__", type(f).__name__))
    if len(set(names)) != len(names):
        raise ValueError(f"reward functions need distinct names to be told apart: {names}")
    return names


def _num(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _text_length(completion: Any) -> int:
    """A completion's length in characters: plain text, or a conversation's message contents."""
    if isinstance(completion, str):
        return len(completion)
    if isinstance(completion, list):
        return sum(len(str(m.get("content", ""))) if isinstance(m, dict) else len(str(m)) for m in completion)
    return len(str(completion))
