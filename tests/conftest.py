import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(autouse=True, scope="session")
def _rule_cache(tmp_path_factory):
    """The validated rule data is cached (rlguard/rules/cache.py) in a folder of this session,
    never the user's ~/.cache: no test depends on what an earlier run left there. The commands
    the tests start inherit it."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("RLGUARD_CACHE_DIR", str(tmp_path_factory.mktemp("rlguard-cache")))
        m.delenv("RLGUARD_NO_CACHE", raising=False)
        yield


@pytest.fixture
def repo() -> Path:
    return REPO


def rlguard_cmd() -> list[str]:
    return [sys.executable, "-m", "rlguard"]
