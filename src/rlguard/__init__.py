"""rlguard: a training-health monitor and early-stopping service for RL fine-tuning of LLMs."""
from .alerts import Action, Alert, Decision, Kind, Severity
from .errors import InputError, LogFormatError, RLGuardError, RuleError, StateError
from .rulespec import Rule, RulePack, load_pack, load_packs
from .watchdog import Watchdog

__version__ = "0.1.0"
__all__ = ["Action", "Alert", "Decision", "Kind", "Severity", "Watchdog", "Rule", "RulePack", "load_pack",
           "load_packs", "RLGuardError", "InputError", "LogFormatError", "RuleError", "StateError"]
