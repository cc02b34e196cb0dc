"""Score rlguard against the labelled synthetic corpus (tests/corpus/data/labels.json).

    .venv/bin/python bench/corpus_eval.py [--data DIR] [--case SUBSTR] [-v] [--json OUT]
    .venv/bin/python bench/corpus_eval.py --hard    # the adversarial corpus (tests/corpus/hard.py)

``--hard`` generates the adversarial corpus into a temporary directory and scores it; its
labels carry ``logging_steps``, so the summary adds recall, false alarms and delays (in steps
and in records) per logging interval.

Every case goes through ``rlguard check FILE --format json`` (a subprocess). The contract
relied on: stdout holds one JSON object per alert per line with keys run, rule, kind,
severity, action, step, metric, value, message; the exit code is 0 (no alert), 1 (alerts)
or 2 (unusable input).

Scoring, per labelled fault: *detected* if an alert of the labelled kind with severity
warning/critical (info also counts for ``plateau``) has step >= onset - SLACK (or >= the
label's ``earliest_step``, for faults present from the first steps); the *delay* is the
first such alert's step minus the onset; *on time* if delay <= max_delay_steps.
*False alarms*: every warning/critical alert on a healthy case; on a fault case, every
warning/critical alert before the earliest accepted step, or of a kind that is neither
labelled nor in ACCEPTED for a labelled kind (effects that fault plausibly causes too).
``regression`` is accepted after faults that pull val reward down: without a configured
baseline rlguard may compare against the run's own first evaluations.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "corpus" / "data"
SLACK = 2  # steps before the labelled onset at which an alert still counts
ALARM = {"warning", "critical"}

#: kinds a labelled fault may legitimately also trigger (after its onset)
ACCEPTED: dict[str, set[str]] = {
    "nonfinite": {"grad_explosion", "loss_spike", "reward_drop", "reward_variance_collapse",
                  "entropy_collapse", "length_explosion", "kl_high", "val_divergence",
                  "regression"},  # NaN weights: garbage generations from then on
    "grad_explosion": {"nonfinite", "loss_spike", "kl_high"},
    "kl_high": {"loss_spike", "entropy_collapse", "grad_explosion", "reward_drop",
                "length_explosion", "regression"},
    "beta_collapse": {"kl_low"},  # KL falls with beta
    "kl_low": {"plateau"},
    "reward_variance_collapse": {"plateau", "reward_drop", "regression"},
    "entropy_collapse": {"reward_variance_collapse", "kl_high"},
    "loss_spike": {"grad_explosion"},
    "length_explosion": {"reward_drop", "regression"},  # truncated answers score 0
    "reward_drop": {"kl_high", "plateau", "regression"},  # val reward falls with it
    "lr_zero": {"plateau"},
    "plateau": set(),
    "regression": {"plateau"},
    "val_divergence": {"plateau", "regression"},
    "dpo_likelihood_collapse": {"dpo_margin_explosion"},
    "dpo_margin_explosion": {"dpo_overfit"},
    "dpo_overfit": {"dpo_margin_explosion"},
    "dpo_no_learning": set(),
}
#: accepted after the onset of any fault
ALWAYS_ACCEPTED = {"change_point"}


def rlguard_cmd() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "rlguard"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "rlguard"]


def run_check(cmd: list[str], path: Path, extra: list[str]) -> tuple[int, list[dict], str]:
    """Exit code, parsed alerts and stderr of one ``rlguard check``."""
    p = subprocess.run(cmd + ["check", str(path), "--format", "json"] + extra,
                       capture_output=True, text=True, timeout=300)
    alerts = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                alerts.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return p.returncode, alerts, p.stderr


def baseline_args(case: dict, flag: str) -> list[str]:
    """Extra CLI arguments telling rlguard the baseline of a regression case."""
    out = []
    for f in case["faults"]:
        if "baseline" in f:
            out += [flag, f"{f['metric']}={f['baseline']}"]
    return out


def check_case(cmd: list[str], data: Path, case: dict, flag: str) -> dict:
    extra = baseline_args(case, flag)
    code, alerts, err = run_check(cmd, data / case["file"], extra)
    note = ""
    if extra and code == 2 and ("unrecognized arguments" in err or "no such option" in err):
        code, alerts, err = run_check(cmd, data / case["file"], [])
        note = f"{flag} not supported: baseline not passed"
    return {"case": case, "code": code, "alerts": alerts, "stderr": err.strip(), "note": note}


def _step(alert: dict, case: dict) -> int:
    s = alert.get("step")
    return case["n_steps"] if s is None else int(s)


def _earliest(fault: dict) -> int:
    """First step at which an alert counts as a detection of ``fault``."""
    return fault.get("earliest_step", fault["onset_step"] - SLACK)


def score(result: dict) -> dict:
    case, alerts = result["case"], result["alerts"]
    faults = case["faults"]
    found = []
    for f in faults:
        sev = ALARM | ({"info"} if f["kind"] == "plateau" else set())
        hits = sorted(_step(a, case) for a in alerts if a.get("kind") == f["kind"]
                      and a.get("severity") in sev and _step(a, case) >= _earliest(f))
        delay = hits[0] - f["onset_step"] if hits else None
        limit = f.get("max_delay_steps", case["max_delay_steps"])
        found.append({**f, "detected": bool(hits), "delay": delay,
                      "on_time": delay is not None and delay <= limit})
    first_onset = min((_earliest(f) for f in faults), default=None)
    ok_kinds = set()
    for f in faults:
        ok_kinds |= {f["kind"]} | ACCEPTED.get(f["kind"], set()) | ALWAYS_ACCEPTED
    false = []
    for a in alerts:
        if a.get("severity") not in ALARM:
            continue
        st = _step(a, case)
        if first_onset is None or st < first_onset or a.get("kind") not in ok_kinds:
            false.append(a)
    return {**result, "found": found, "false": false}


def _fmt_false(false: list[dict]) -> str:
    seen: dict[str, list[int]] = {}
    for a in false:
        seen.setdefault(f"{a.get('kind')}/{a.get('metric')}", []).append(a.get("step"))
    return ", ".join(f"{k}@{v[0]}" + (f"(x{len(v)})" if len(v) > 1 else "")
                     for k, v in seen.items()) or "-"


def print_table(scored: list[dict]) -> None:
    print(f"{'case':40} {'format':12} {'exit':4}  {'labelled -> result':50} false alarms")
    for r in scored:
        c = r["case"]
        if r["code"] not in (0, 1):
            res = f"UNUSABLE (exit {r['code']}): {r['stderr'][:60]}"
        elif not r["found"]:
            res = "healthy"
        else:
            parts = []
            for f in r["found"]:
                tag = ("ok" if f["on_time"] else "LATE") + f" {f['delay']:+d}" if f["detected"] \
                    else "MISSED"
                parts.append(f"{f['kind']}@{f['onset_step']} {tag}")
            res = "; ".join(parts)
        print(f"{c['name']:40} {c['format']:12} {r['code']:4}  {res:50} {_fmt_false(r['false'])}"
              + (f"  [{r['note']}]" if r["note"] else ""))


def totals(scored: list[dict]) -> dict:
    per_kind: dict[str, list[int]] = {}
    delays = []
    for r in scored:
        for f in r["found"]:
            hit = per_kind.setdefault(f["kind"], [0, 0, 0])  # on time, late, total
            hit[0] += f["on_time"]
            hit[1] += f["detected"] and not f["on_time"]
            hit[2] += 1
            if f["detected"]:
                delays.append(f["delay"])
    per_interval: dict[int, dict] = {}
    for r in scored:
        c = r["case"]
        L = int(c.get("logging_steps", 1))
        row = per_interval.setdefault(L, {"faults": 0, "on_time": 0, "healthy": 0,
                                          "healthy_alarmed": 0, "delays_steps": [], "delays_records": []})
        if not c["faults"]:
            row["healthy"] += 1
            row["healthy_alarmed"] += bool(r["false"])
        for f in r["found"]:
            row["faults"] += 1
            row["on_time"] += f["on_time"]
            if f["detected"]:
                console = c["format"] == "trl_console"  # its steps are already record indices
                row["delays_steps"].append(f["delay"] * (L if console else 1))
                row["delays_records"].append(f["delay"] if console else f["delay"] / L)
    healthy_false = sum(len(r["false"]) for r in scored if not r["case"]["faults"])
    fault_false = sum(len(r["false"]) for r in scored if r["case"]["faults"])
    n_faults = sum(v[2] for v in per_kind.values())
    return {"recall_per_kind": {k: v[0] / v[2] for k, v in sorted(per_kind.items())},
            "late_per_kind": {k: v[1] for k, v in sorted(per_kind.items())},
            "recall": sum(v[0] for v in per_kind.values()) / max(n_faults, 1),
            "false_alarms_healthy": healthy_false, "false_alarms_fault_cases": fault_false,
            "healthy_cases_with_false_alarms": sum(1 for r in scored
                                                   if not r["case"]["faults"] and r["false"]),
            "unusable": [r["case"]["name"] for r in scored if r["code"] not in (0, 1)],
            "median_delay": statistics.median(delays) if delays else None,
            "max_delay": max(delays) if delays else None,
            "per_interval": {L: {"recall": v["on_time"] / v["faults"] if v["faults"] else None,
                                 "faults": v["faults"], "healthy": v["healthy"],
                                 "healthy_with_false_alarms": v["healthy_alarmed"],
                                 "median_delay_steps": statistics.median(v["delays_steps"]) if v["delays_steps"] else None,
                                 "median_delay_records": statistics.median(v["delays_records"]) if v["delays_records"] else None}
                             for L, v in sorted(per_interval.items())}}


def print_totals(t: dict) -> None:
    print("\nrecall per kind (on time; late in brackets):")
    for k, v in t["recall_per_kind"].items():
        late = t["late_per_kind"][k]
        print(f"  {k:26} {v:5.0%}" + (f"  [{late} late]" if late else ""))
    print(f"overall recall: {t['recall']:.0%}")
    print(f"false alarms: {t['false_alarms_healthy']} on healthy cases "
          f"({t['healthy_cases_with_false_alarms']} cases), "
          f"{t['false_alarms_fault_cases']} on fault cases")
    print(f"detection delay (steps): median {t['median_delay']}, max {t['max_delay']}")
    if len(t["per_interval"]) > 1:
        print("\nper logging interval:  faults  recall  healthy  healthy-with-alarms  median delay (steps / records)")
        for L, v in t["per_interval"].items():
            rec = "-" if v["recall"] is None else f"{v['recall']:.0%}"
            print(f"  every {L:3} steps        {v['faults']:4}  {rec:>6}  {v['healthy']:7}  "
                  f"{v['healthy_with_false_alarms']:19}  {v['median_delay_steps']} / {v['median_delay_records']}")
    if t["unusable"]:
        print(f"unusable input (exit 2): {', '.join(t['unusable'])}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="corpus directory with labels.json")
    ap.add_argument("--hard", action="store_true",
                    help="generate and score the adversarial corpus (tests/corpus/hard.py)")
    ap.add_argument("--case", help="only cases whose name contains this")
    ap.add_argument("--rlguard", help="command to run rlguard (default: .venv/bin/rlguard, "
                    "else python -m rlguard)")
    ap.add_argument("--baseline-flag", default="--baseline",
                    help="rlguard check option taking METRIC=VALUE for regression cases")
    ap.add_argument("-j", "--jobs", type=int, default=min(os.cpu_count() or 2, 2))
    ap.add_argument("-v", "--verbose", action="store_true", help="print every alert")
    ap.add_argument("--json", type=Path, help="write per-case results and totals here")
    args = ap.parse_args(argv)

    cmd = args.rlguard.split() if args.rlguard else rlguard_cmd()
    if args.hard:
        import tempfile

        args.data = Path(tempfile.mkdtemp(prefix="rlguard-hard-"))
        subprocess.run([sys.executable, str(ROOT / "tests" / "corpus" / "hard.py"), str(args.data)],
                       check=True, capture_output=True)
    cases = json.loads((args.data / "labels.json").read_text())["cases"]
    cases = [c for c in cases if not args.case or args.case in c["name"]]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda c: check_case(cmd, args.data, c, args.baseline_flag),
                                cases))
    scored = [score(r) for r in results]
    print_table(scored)
    if args.verbose:
        for r in scored:
            for a in r["alerts"]:
                print(f"  {r['case']['name']}: {json.dumps(a)}")
    t = totals(scored)
    print_totals(t)
    if args.json:
        slim = [{"case": r["case"]["name"], "exit": r["code"], "found": r["found"],
                 "false_alarms": r["false"], "note": r["note"]} for r in scored]
        args.json.write_text(json.dumps({"cases": slim, "totals": t}, indent=1) + "\n")
    return 1 if t["unusable"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
