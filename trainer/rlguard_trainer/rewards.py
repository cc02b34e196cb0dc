"""Reward functions given as import paths, called with TRL's signature.

    --reward mypkg.rewards:accuracy            a module on PYTHONPATH (or the working directory)
    --reward rewards.py:format=0.5             a file, with a weight (default 1.0)

Each is ``fn(prompts, completions, **columns) -> list[float | None]``, exactly as TRL's
GRPOTrainer calls it: ``prompts`` as the dataset holds them, ``completions`` as strings (or,
for chat-message prompts, ``[{"role": "assistant", "content": text}]``), ``completion_ids``,
``trainer_state`` (``global_step``, ``max_steps``), and every other dataset column, one value
per completion. ``None`` means "not applicable" and becomes NaN; how NaN and weights combine
is ``grpo.combine_rewards`` (TRL's rule). A reward's name in the logs (``rewards/<name>/mean``)
is its function's ``__name__``.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import numbers
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from .config import ConfigError

#: what TRL passes every reward function besides the dataset's columns
TRL_ARGS = ("prompts", "completions", "completion_ids", "trainer_state")


class RewardError(ConfigError):
    """A reward function that cannot be called as TRL calls it, raised, or returned non-numbers."""


@dataclass
class Reward:
    name: str
    fn: Callable
    weight: float = 1.0


def load_rewards(specs: list[str]) -> list[Reward]:
    rewards = [load_reward(s) for s in specs]
    names = [r.name for r in rewards]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"--reward: two reward functions are named {dup[0]!r}; their logs would mix")
    return rewards


def load_reward(spec: str) -> Reward:
    target, _, weight = spec.partition("=")
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--reward {spec!r}: use module:function[=weight] or path/to/file.py:function[=weight]")
    try:
        w = float(weight) if weight else 1.0
    except ValueError:
        raise ConfigError(f"--reward {spec!r}: the weight after '=' must be a number, got {weight!r}") from None
    module = _import(module_name, spec)
    fn = getattr(module, attr, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        what = "no" if fn is None else "a non-callable"
        raise ConfigError(f"--reward {spec!r}: {module_name} has {what} attribute {attr!r}; "
                          f"functions there: {', '.join(found) or '(none)'}")
    return Reward(_callable_name(fn), fn, w)


def _import(name: str, spec: str):
    try:
        if name.endswith(".py"):
            return _import_file(Path(name), spec)
        if "" not in sys.path:
            sys.path.append("")  # as `python -m` does: modules in the working directory import
        return importlib.import_module(name)
    except ConfigError:
        raise
    except ModuleNotFoundError as exc:
        raise ConfigError(f"--reward {spec!r}: cannot import {name} ({exc}); is its directory on "
                          f"PYTHONPATH?") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed while importing
        raise ConfigError(f"--reward {spec!r}: importing {name} failed: {type(exc).__name__}: {exc}") from None


def _import_file(path: Path, spec: str):
    if not path.is_file():
        raise ConfigError(f"--reward {spec!r}: no such file {path}")
    mod_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def _callable_name(fn) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


def check_signature(r: Reward, columns: list[str], where: str) -> None:
    """Raise RewardError when ``r`` cannot be called as TRL calls it with the dataset's
    ``columns``: a parameter no column fills (a typo, or a column the dataset lacks), or no
    ``**kwargs`` to take the columns it does not name. Checked before any model loads."""
    try:
        sig = inspect.signature(r.fn)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to check before calling it
    given = [*TRL_ARGS, *columns]
    params = sig.parameters.values()
    takes_rest = any(p.kind is p.VAR_KEYWORD for p in params)
    need = [p.name for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in given]
    if need:
        raise RewardError(f"reward function {r.name!r} needs {', '.join(map(repr, need))}, which {where} lacks; "
                          f"it is called with {', '.join(TRL_ARGS)} and the columns: {', '.join(columns) or 'none'}")
    named = {p.name for p in params}
    extra = [c for c in given if c not in named]
    if extra and not takes_rest:
        raise RewardError(f"reward function {r.name!r} takes no {', '.join(map(repr, extra))}: TRL passes every "
                          f"column; add **kwargs to its parameters")


def score(rewards: list[Reward], prompts: list, completions: list[str], completion_ids: list[list[int]],
          columns: dict[str, list], state: SimpleNamespace):
    """[B, F] rewards of B completions by F functions; NaN where a function returned None.
    A function that raises or returns something else than numbers or None is a RewardError
    naming it (TRL refuses strings as well)."""
    import torch

    conversational = bool(prompts) and isinstance(prompts[0], list)
    comps = [[{"role": "assistant", "content": c}] for c in completions] if conversational else completions
    out = torch.full((len(prompts), len(rewards)), float("nan"))
    step = getattr(state, "global_step", None)
    at = f" at step {step}" if step is not None else ""
    for j, r in enumerate(rewards):
        try:
            values = list(r.fn(prompts=prompts, completions=comps, completion_ids=completion_ids,
                               trainer_state=state, **columns))
        except Exception as exc:  # noqa: BLE001 - the user's function: one line naming it
            raise RewardError(f"reward function {r.name!r} raised{at}: {type(exc).__name__}: {exc}") from exc
        if len(values) != len(prompts):
            raise RewardError(f"reward function {r.name!r} returned {len(values)} rewards for {len(prompts)} "
                              "completions (one per completion is expected)")
        bad = next((i for i, v in enumerate(values) if v is not None and not _is_number(v)), None)
        if bad is not None:
            raise RewardError(f"reward function {r.name!r} returned {values[bad]!r} ({type(values[bad]).__name__}) "
                              f"for completion {bad + 1}{at}: rewards are numbers, or None for 'not applicable'")
        out[:, j] = torch.tensor([float("nan") if v is None else float(v) for v in values])
    return out


def _is_number(v) -> bool:
    """A float, int, bool (TRL takes 0/1), numpy or 0-d tensor scalar; never a string."""
    if isinstance(v, (str, bytes)):
        return False
    if isinstance(v, numbers.Real):
        return True
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True
