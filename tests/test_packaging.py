"""A built wheel carries everything a cluster install needs: the rule packs, the alias table
and the rule tests live in rules/ at the top of the repository and are linked into the package."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_the_rules(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next(tmp_path.glob("rlguard-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"rlguard/rules/data/default.yaml", "rlguard/rules/data/aliases.yaml", "rlguard/rules/data/rules.schema.json"} <= names
    assert any(n.startswith("rlguard/rules/data/tests/") for n in names)
    parts = {f"rlguard/rules/data/default/{p.name}" for p in (ROOT / "rules" / "default").glob("*.yaml")}
    assert parts and parts <= names  # the files of rules the default pack includes
    assert "rlguard/detectors/base.py" in names and "rlguard_trainer/loop.py" in names
    meta = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    core = [line for line in text.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert not [line for line in core if "torch" in line or "transformers" in line]  # the monitor core stays small
