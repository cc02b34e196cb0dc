"""Where rlguard finds the data it ships (rule packs, alias table, rule tests)."""
from __future__ import annotations

from pathlib import Path

#: The shipped rules folder: ``rules/`` at the top of the repository, linked into this package as ``data``.
RULES_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_PACK = RULES_DIR / "default.yaml"
RULE_TESTS_DIR = RULES_DIR / "tests"
