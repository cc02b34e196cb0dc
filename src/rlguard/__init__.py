"""rlguard: a training-health monitor and early-stopping service for RL fine-tuning of LLMs.

Every public name is loaded when first asked for (PEP 562), so ``python -m rlguard`` and
``rlguard check`` import only what the command runs: ``RLGuardCallback`` imports
transformers, the watchdog numpy, the rule spec pydantic and yaml. ``from rlguard import X``
and ``rlguard.X`` work as before.
"""
from __future__ import annotations

from importlib import import_module

from .core.version import VERSION

__version__ = VERSION

#: public name -> (module, its name there)
_LAZY = {
    **{n: ("core.alerts", n) for n in ("Action", "Alert", "Decision", "Kind", "Severity")},
    "coverage_lines": ("core.coverage", "summary_lines"),
    **{n: ("core.errors", n) for n in ("InputError", "LogFormatError", "RLGuardError", "RuleError", "StateError")},
    **{n: ("inloop.reward_watch", n) for n in ("RewardWatch", "reward_watch", "watch_rewards")},
    **{n: ("core.keep", n) for n in ("Checkpoints", "Keep", "Pinned", "checkpoint_to_keep")},
    **{n: ("rules.spec", n) for n in ("Rule", "RulePack", "load_pack", "load_packs")},
    **{n: ("core.verdict", n) for n in ("RunRecords", "Verdict", "decision_record", "stop_record")},
    "Watchdog": ("engine.watchdog", "Watchdog"),
    **{n: ("inloop.guard", n) for n in ("InLoopGuard", "Broadcast")},
    "RLGuardCallback": ("inloop.callback", "RLGuardCallback"),
}


def __getattr__(name: str):
    """Load a public name from its module on first use, and keep it here."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'rlguard' has no attribute {name!r}")
    try:
        value = getattr(import_module(f".{where[0]}", __name__), where[1])
    except ImportError as exc:
        if name != "RLGuardCallback":
            raise
        raise ImportError(f"RLGuardCallback needs transformers ({exc}); "  # pragma: no cover - depends on the install
                          "install it with: pip install 'rlguard[trainer]'") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["RLGuardCallback", "Action", "Alert", "Decision", "Kind", "Severity", "Watchdog", "Rule", "RulePack", "load_pack",
           "load_packs", "Verdict", "RunRecords", "decision_record", "stop_record", "Keep", "Checkpoints", "Pinned", "checkpoint_to_keep",
           "InLoopGuard", "Broadcast", "coverage_lines", "RLGuardError", "InputError",
           "LogFormatError", "RuleError", "StateError", "RewardWatch", "reward_watch", "watch_rewards"]
