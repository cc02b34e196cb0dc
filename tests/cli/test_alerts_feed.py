"""`rlguard alerts DIR --since CURSOR --format json` (issue 47 item 11): a feed a script polls,
through the real CLI, over rlguard/decisions.jsonl as the in-loop guard's RunRecords writes it
(the callback's and the bundled trainer's writer), decisions from a real Watchdog."""
from __future__ import annotations

import json
import subprocess
import sys

from rlguard.sources.base import LogRecord
from rlguard.core.verdict import RunRecords
from rlguard.engine.watchdog import Watchdog


def alerts(*args):
    r = subprocess.run([sys.executable, "-m", "rlguard", "alerts", *map(str, args)], capture_output=True, text=True,
                       timeout=120)
    return r, (json.loads(r.stdout) if r.returncode == 0 and "--format" in args else None)


def nan_run(run_dir, start, n):
    """A run whose loss and gradient norm turn NaN at record ``start + 3``; its decisions written as the guard writes them."""
    wd = Watchdog(run=run_dir.name)
    bad = float("nan")
    recs = [LogRecord(s, {"loss": bad if s >= start + 3 else 0.5, "grad_norm": bad if s >= start + 3 else 1.0}, s)
            for s in range(start, start + n)]
    return RunRecords(run_dir, run_dir.name).decisions(wd.ingest(recs))


def test_a_poll_returns_what_was_appended_since_its_cursor(tmp_path):
    root = tmp_path / "runs"
    a, b = root / "team" / "a", root / "b"
    written = nan_run(a, 1, 6)
    assert any(d["rule"] for d in written)
    r, first = alerts(root, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [x["rule"] for x in first["alerts"]] == [d["rule"] for d in written if d["rule"]]
    assert all(x["run_dir"] == str(a) for x in first["alerts"]) and first["more"] is False and first["notes"] == []
    # nothing new: nothing returned, the same position
    _, again = alerts(root, "--since", first["cursor"], "--format", "json")
    assert again["alerts"] == [] and again["cursor"] == first["cursor"]
    # a new run appears and the first appends: only the new lines (files in path order, lines in file order)
    new_b = [d for d in nan_run(b, 1, 5) if d["rule"]]
    more_a = (a / "rlguard" / "decisions.jsonl")
    line = dict(written[-1], step=99, message="appended later")
    with open(more_a, "a") as f:
        f.write(json.dumps(line) + "\n" + json.dumps(dict(line, step=100))[:30])  # the 2nd still being written
    _, nxt = alerts(root, "--since", first["cursor"], "--format", "json")
    got = [(x["run_dir"], x["step"]) for x in nxt["alerts"]]
    assert got == [(str(b), d["step"]) for d in new_b] + [(str(a), 99)], got
    # the rest of the half-written line arrives: the next poll has it, once
    with open(more_a, "a") as f:
        f.write(json.dumps(dict(line, step=100))[30:] + "\n")
    _, last = alerts(root, "--since", nxt["cursor"], "--format", "json")
    assert [x["step"] for x in last["alerts"]] == [100]


def test_limit_more_replaced_files_and_a_bad_cursor(tmp_path):
    run = tmp_path / "r"
    written = [d for d in nan_run(run, 1, 8) if d["rule"]]
    assert len(written) >= 2
    _, one = alerts(tmp_path, "--limit", "1", "--format", "json")
    assert len(one["alerts"]) == 1 and one["more"] is True
    _, rest = alerts(tmp_path, "--since", one["cursor"], "--format", "json")
    assert [x["step"] for x in one["alerts"] + rest["alerts"]] == [d["step"] for d in written] and not rest["more"]
    # the file replaced (a new run in the directory): read again from its start, and said
    path = run / "rlguard" / "decisions.jsonl"
    path.rename(tmp_path / "old.jsonl")
    path.write_text(json.dumps(written[0]) + "\n")
    _, fresh = alerts(tmp_path, "--since", rest["cursor"], "--format", "json")
    assert len(fresh["alerts"]) == 1
    assert fresh["notes"] == [f"{path}: replaced or cut since the cursor: read again from its start"]
    r, _ = alerts(tmp_path, "--since", "not-a-cursor", "--format", "json")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("rlguard: error: --since: not a cursor this rlguard gave ('not-a-cursor'): pass the "
                        "'cursor' of the previous answer, or leave --since out to read from the start\n")
    r, _ = alerts(tmp_path / "nope")
    assert r.returncode == 2 and r.stderr == (f"rlguard: error: {tmp_path / 'nope'}: not a directory (give run "
                                              f"directories or a folder of runs)\n")
    text, _ = alerts(tmp_path)
    assert text.returncode == 0 and text.stdout.splitlines()[-1].startswith("cursor: ")
