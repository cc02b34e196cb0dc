import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def repo() -> Path:
    return REPO


def rlguard_cmd() -> list[str]:
    return [sys.executable, "-m", "rlguard"]
