"""rlguard: a training-health monitor and early-stopping service for RL fine-tuning of LLMs."""
from .core.alerts import Action, Alert, Decision, Kind, Severity
from .core.coverage import summary_lines as coverage_lines
from .core.errors import InputError, LogFormatError, RLGuardError, RuleError, StateError
from .inloop.reward_watch import RewardWatch, reward_watch, watch_rewards
from .core.keep import Checkpoints, Keep, Pinned, checkpoint_to_keep
from .rules.spec import Rule, RulePack, load_pack, load_packs
from .core.verdict import RunRecords, Verdict, decision_record, stop_record
from .core.version import VERSION
from .engine.watchdog import Watchdog

__version__ = VERSION


def __getattr__(name: str):
    """``RLGuardCallback`` imports transformers, so it is loaded only when asked for; so is the
    in-loop guard (``rlguard check`` and the daemon start without it)."""
    if name in ("InLoopGuard", "Broadcast"):
        from .inloop import guard as inloop

        return getattr(inloop, name)
    if name == "RLGuardCallback":
        try:
            from .inloop.callback import RLGuardCallback
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(f"RLGuardCallback needs transformers ({exc}); "
                              "install it with: pip install 'rlguard[trainer]'") from None
        return RLGuardCallback
    raise AttributeError(f"module 'rlguard' has no attribute {name!r}")
__all__ = ["RLGuardCallback", "Action", "Alert", "Decision", "Kind", "Severity", "Watchdog", "Rule", "RulePack", "load_pack",
           "load_packs", "Verdict", "RunRecords", "decision_record", "stop_record", "Keep", "Checkpoints", "Pinned", "checkpoint_to_keep",
           "InLoopGuard", "Broadcast", "coverage_lines", "RLGuardError", "InputError",
           "LogFormatError", "RuleError", "StateError", "RewardWatch", "reward_watch", "watch_rewards"]
