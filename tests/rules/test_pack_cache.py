"""The validated shipped rule data is cached between processes (rlguard/rules/cache.py): a hit
is the very pack a fresh load gives, an edit to any file it was read from (or to rlguard's code)
rebuilds it, and a corrupt, foreign or unwritable cache is never an error."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlguard.core.errors import RuleError
from rlguard.rules import cache, spec
from rlguard.rules.paths import DEFAULT_PACK, RULES_DIR
from rlguard.rules.spec import load_pack, load_packs
from rlguard.rules.vocab import DEFAULT_ALIASES, load_alias_table


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("RLGUARD_CACHE_DIR", str(folder))
    monkeypatch.delenv("RLGUARD_NO_CACHE", raising=False)
    return folder


@pytest.fixture
def shipped(tmp_path, monkeypatch) -> Path:
    """A copy of the shipped pack that the cache treats as shipped (it may be edited)."""
    root = tmp_path / "rules"
    root.mkdir()
    shutil.copy(DEFAULT_PACK, root / "default.yaml")
    shutil.copytree(RULES_DIR / "default", root / "default")
    monkeypatch.setattr(cache, "RULES_DIR", root)
    return root / "default.yaml"


def _pack(path: Path):
    return cache.cached(path, load_pack, lambda p: p.include)


def _refuse(*_a, **_k):
    raise AssertionError("built again: the cache was not used")


def test_a_hit_is_the_same_pack_as_a_fresh_load(cache_dir, monkeypatch):
    first = load_packs(None, with_default=True)  # builds and saves
    assert list(cache_dir.glob("*.pickle"))
    with monkeypatch.context() as m:
        m.setattr(spec, "load_pack", _refuse)
        hit = load_packs(None, with_default=True)
    monkeypatch.setenv("RLGUARD_NO_CACHE", "1")
    fresh = load_packs(None, with_default=True)
    assert hit == fresh == first
    assert [p.model_dump(by_alias=True) for p in hit] == [p.model_dump(by_alias=True) for p in fresh]
    assert [(r.id, r.params, r.detector_params()) for r in hit[0].rules] == \
        [(r.id, r.params, r.detector_params()) for r in fresh[0].rules]
    assert len(hit[0].rules) > 50


def test_the_alias_table_is_cached_too(cache_dir, monkeypatch):
    built = cache.cached(DEFAULT_ALIASES, load_alias_table)
    assert list(cache_dir.glob("*.pickle"))
    hit = cache.cached(DEFAULT_ALIASES, _refuse)
    assert hit == built == load_alias_table()


def test_an_edited_included_file_invalidates_the_entry(cache_dir, shipped, monkeypatch):
    before = _pack(shipped)
    rule = shipped.parent / "default" / "kl_high.yaml"
    text = rule.read_text()
    assert "severity: warning" in text
    rule.write_text(text.replace("severity: warning", "severity: critical", 1))
    after = _pack(shipped)
    assert after != before
    assert after == load_pack(shipped)  # what a fresh load of the edited files gives
    monkeypatch.setattr(cache, "RULES_DIR", shipped.parent)
    assert cache.cached(shipped, _refuse, lambda p: p.include) == after  # and that is cached now


def test_an_edited_pack_file_invalidates_the_entry(cache_dir, shipped):
    before = _pack(shipped)
    shipped.write_text(shipped.read_text().replace("description: Health", "description: Edited health", 1))
    after = _pack(shipped)
    assert before.description.startswith("Health") and after.description.startswith("Edited health")


def test_a_change_of_rlguards_code_invalidates_the_entry(cache_dir, shipped, monkeypatch):
    _pack(shipped)
    monkeypatch.setattr(cache, "_code", ["another version of the detectors"])
    with pytest.raises(AssertionError, match="built again"):
        cache.cached(shipped, _refuse, lambda p: p.include)


def test_a_corrupt_entry_is_ignored_and_replaced(cache_dir, shipped):
    good = _pack(shipped)
    (entry,) = cache_dir.glob("*.pickle")
    for junk in (b"", b"not a pickle", entry.read_bytes()[:100]):
        entry.write_bytes(junk)
        assert _pack(shipped) == good
    assert cache.cached(shipped, _refuse, lambda p: p.include) == good  # a whole entry again


def test_an_entry_others_could_write_is_not_loaded(cache_dir, shipped):
    _pack(shipped)
    os.chmod(cache_dir, 0o777)
    with pytest.raises(AssertionError, match="built again"):
        cache.cached(shipped, _refuse, lambda p: p.include)


def test_an_unwritable_cache_folder_is_no_error(tmp_path, shipped, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RLGUARD_CACHE_DIR", str(blocker / "cache"))  # a folder that cannot be made
    assert _pack(shipped) == load_pack(shipped)
    assert _pack(shipped) == load_pack(shipped)


def test_turned_off_nothing_is_written(cache_dir, shipped, monkeypatch):
    monkeypatch.setenv("RLGUARD_NO_CACHE", "1")
    assert cache.cache_dir() is None
    _pack(shipped)
    assert not cache_dir.exists()


def test_packs_outside_the_shipped_folder_are_not_cached(cache_dir, tmp_path):
    mine = tmp_path / "mine.yaml"
    shutil.copy(DEFAULT_PACK, mine)
    shutil.copytree(RULES_DIR / "default", tmp_path / "default")
    assert _pack(mine) == load_pack(mine)
    assert not cache_dir.exists()


def test_errors_are_raised_every_time_and_never_cached(cache_dir, shipped):
    shipped.write_text(shipped.read_text() + "\nbogus_field: 1\n")
    for _ in range(2):
        with pytest.raises(RuleError, match="bogus_field"):
            _pack(shipped)
    assert not list(cache_dir.glob("*.pickle"))


def test_a_warm_cache_reads_no_yaml(cache_dir):
    code = ("import sys; from rlguard.rules.spec import load_packs; from rlguard.rules.vocab import "
            "default_alias_table; load_packs(None, with_default=True); default_alias_table(); "
            "print('yaml' in sys.modules)")
    env = {**os.environ, "RLGUARD_CACHE_DIR": str(cache_dir)}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
            for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["True", "False"]  # cold: read the YAML; warm: not
