"""The new user's journey end to end (issue 47): examples/journey.py runs a real TRL GRPO run
with RLGuardCallback at learning rate 50, the real daemon beside it posting through slack-sdk's
client to a local Slack stand-in, then the real `rlguard check` and `rlguard report`; the script
exits 0 only when the console, Slack, check and the report agree with rlguard/stop.json on where
the run stopped, where the incident began and the checkpoint to keep."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("slack_sdk")

ROOT = Path(__file__).resolve().parents[2]


def test_the_journey_tells_one_story(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "journey.py"), "--out", str(tmp_path / "j")],
                       capture_output=True, text=True, timeout=900)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert "one story: every part agrees" in r.stdout
    # the stop and its onset as the callback said them, with no checkpoint inside the incident
    assert "the incident began at step 2" in r.stdout
    assert "checkpoint to keep: none saved before step 2: restart from the initial weights" in r.stdout
