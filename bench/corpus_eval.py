"""Score rlguard against a labelled synthetic corpus (labels.json + one log file per case).

    .venv/bin/python bench/corpus_eval.py [--corpus DIR] [--case SUBSTR] [-v] [--json OUT]
    .venv/bin/python bench/corpus_eval.py --corpus hard   # the adversarial corpus

``--corpus`` (default ``tests/corpus/data``): a directory with ``labels.json``, or the
shorthands ``data`` and ``hard`` (``tests/corpus/hard``, written by ``tests/corpus/generate.py
--hard``; ``--hard`` is the same as ``--corpus hard``). Cases whose labels carry
``logging_steps`` (the hard corpus) are also summarised per logging interval.

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

Steps and records: in the TRL console format (``trl_console``) rlguard numbers records 1, 2,
3..., and the labels are record indices; everywhere else steps are optimizer steps. Delays
are reported in both units: records = steps / logging_steps (console: steps = records x
logging_steps). SLACK is 2 steps; for console cases it is ``SLACK // logging_steps`` records.
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
#: ``--corpus`` shorthands
CORPORA = {"data": DATA, "hard": ROOT / "tests" / "corpus" / "hard"}
SLACK = 2  # steps before the labelled onset at which an alert still counts
CONSOLE = "trl_console"  # the format whose labels count records, not steps
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
    "kl_low": {"plateau", "stall"},  # the policy stopped moving
    "reward_variance_collapse": {"plateau", "reward_drop", "regression"},
    "entropy_collapse": {"reward_variance_collapse", "kl_high"},
    "loss_spike": {"grad_explosion"},
    "length_explosion": {"reward_drop", "regression"},  # truncated answers score 0
    "reward_drop": {"kl_high", "plateau", "regression"},  # val reward falls with it
    "lr_zero": {"plateau", "stall"},
    "plateau": set(),
    "regression": {"plateau", "reward_hacking"},  # the corpus's regression: val falls while the train reward rises
    "val_divergence": {"plateau", "regression"},
    "dpo_likelihood_collapse": {"dpo_margin_explosion"},  # rejected falls faster than chosen
    "dpo_margin_explosion": {"dpo_overfit"},  # loss -> 0, accuracies -> 1
    "dpo_overfit": {"dpo_margin_explosion", "val_divergence"},  # eval loss rises
    "dpo_no_learning": {"plateau", "stall"},
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


def interval(case: dict) -> int:
    """The case's logging interval (1 for corpora that do not label it)."""
    return int(case.get("logging_steps", 1))


def _earliest(fault: dict, case: dict | None = None) -> int:
    """First step (console: record) at which an alert counts as a detection of ``fault``."""
    slack = SLACK
    if case is not None and case.get("format") == CONSOLE:
        slack = SLACK // interval(case)  # labels count records there
    return fault.get("earliest_step", fault["onset_step"] - slack)


def delay_units(case: dict, delay: float) -> tuple[float, float]:
    """A delay in the case's label units -> (steps, records)."""
    L = interval(case)
    if case.get("format") == CONSOLE:
        return delay * L, float(delay)
    return float(delay), delay / L


def score(result: dict) -> dict:
    case, alerts = result["case"], result["alerts"]
    faults = case["faults"]
    found = []
    for f in faults:
        sev = ALARM | ({"info"} if f["kind"] == "plateau" else set())
        hits = sorted(_step(a, case) for a in alerts if a.get("kind") == f["kind"]
                      and a.get("severity") in sev and _step(a, case) >= _earliest(f, case))
        delay = hits[0] - f["onset_step"] if hits else None
        limit = f.get("max_delay_steps", case["max_delay_steps"])
        found.append({**f, "detected": bool(hits), "delay": delay,
                      "on_time": delay is not None and delay <= limit})
    first_onset = min((_earliest(f, case) for f in faults), default=None)
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
    width = max([40] + [len(r["case"]["name"]) for r in scored])
    print(f"{'case':{width}} {'format':12} {'L':>3} {'exit':4}  {'labelled -> result':50} "
          "false alarms")
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
        print(f"{c['name']:{width}} {c['format']:12} {interval(c):3} {r['code']:4}  {res:50} "
              f"{_fmt_false(r['false'])}" + (f"  [{r['note']}]" if r["note"] else ""))


def _med(xs: list[float]) -> float | None:
    return float(statistics.median(xs)) if xs else None


def _max(xs: list[float]) -> float | None:
    return float(max(xs)) if xs else None


def _group() -> dict:
    return {"faults": 0, "on_time": 0, "late": 0, "missed": 0, "delay_steps": [],
            "delay_records": []}


def _add_fault(g: dict, case: dict, f: dict) -> None:
    g["faults"] += 1
    g["on_time"] += f["on_time"]
    g["late"] += f["detected"] and not f["on_time"]
    g["missed"] += not f["detected"]
    if f["detected"]:
        steps, recs = delay_units(case, f["delay"])
        g["delay_steps"].append(steps)
        g["delay_records"].append(recs)


def _summary(g: dict) -> dict:
    out = {k: g[k] for k in ("faults", "on_time", "late", "missed")}
    out["recall"] = g["on_time"] / g["faults"] if g["faults"] else None
    for unit in ("steps", "records"):
        xs = g[f"delay_{unit}"]
        out[f"median_delay_{unit}"], out[f"max_delay_{unit}"] = _med(xs), _max(xs)
    for k in ("healthy", "healthy_with_false_alarms", "false_alarms_healthy"):
        if k in g:
            out[k] = g[k]
    return out


def totals(scored: list[dict]) -> dict:
    """Recall, late and missed faults, delays (steps and records), overall, per kind and per
    logging interval; false alarms on healthy cases overall and per interval."""
    overall, per_kind, per_interval = _group(), {}, {}
    for r in scored:
        c = r["case"]
        row = per_interval.setdefault(interval(c), {**_group(), "healthy": 0,
                                                    "healthy_with_false_alarms": 0,
                                                    "false_alarms_healthy": 0})
        if not c["faults"]:
            row["healthy"] += 1
            row["healthy_with_false_alarms"] += bool(r["false"])
            row["false_alarms_healthy"] += len(r["false"])
        for f in r["found"]:
            for g in (overall, per_kind.setdefault(f["kind"], _group()), row):
                _add_fault(g, c, f)
    healthy = [r for r in scored if not r["case"]["faults"]]
    out = _summary(overall)
    out.update({
        "cases": len(scored), "healthy": len(healthy),
        "false_alarms_healthy": sum(len(r["false"]) for r in healthy),
        "healthy_cases_with_false_alarms": sum(1 for r in healthy if r["false"]),
        "false_alarms_fault_cases": sum(len(r["false"]) for r in scored if r["case"]["faults"]),
        "unusable": [r["case"]["name"] for r in scored if r["code"] not in (0, 1)],
        "per_kind": {k: _summary(v) for k, v in sorted(per_kind.items())},
        "per_interval": {L: _summary(v) for L, v in sorted(per_interval.items())},
    })
    # kept for callers of the earlier summary
    out["recall_per_kind"] = {k: v["recall"] for k, v in out["per_kind"].items()}
    out["late_per_kind"] = {k: v["late"] for k, v in out["per_kind"].items()}
    out["median_delay"], out["max_delay"] = out["median_delay_steps"], out["max_delay_steps"]
    return out


def _n(x: float | None, fmt: str = "g") -> str:
    return "-" if x is None else format(x, fmt)


def _delays(v: dict) -> str:
    return (f"{_n(v['median_delay_steps'], '.0f'):>5} / {_n(v['max_delay_steps'], '.0f'):<5}  "
            f"{_n(v['median_delay_records'], '.1f'):>5} / {_n(v['max_delay_records'], '.1f'):<5}")


def print_totals(t: dict) -> None:
    print(f"\n{'recall per kind':26} faults  recall  late  missed   delay steps    delay records"
          f"\n{'':26} {'':6}  {'':6}  {'':4}  {'':6}   median / max   median / max")
    for k, v in t["per_kind"].items():
        print(f"  {k:24} {v['faults']:6}  {v['recall']:6.0%}  {v['late']:4}  {v['missed']:6}   "
              + _delays(v))
    print(f"overall: recall {t['recall']:.0%} ({t['on_time']}/{t['faults']} on time, "
          f"{t['late']} late, {t['missed']} missed)" if t["faults"] else "overall: no faults")
    print(f"false alarms: {t['false_alarms_healthy']} on healthy cases "
          f"({t['healthy_cases_with_false_alarms']} of {t['healthy']} cases), "
          f"{t['false_alarms_fault_cases']} on fault cases")
    print(f"detection delay: median {_n(t['median_delay_steps'], '.0f')} steps / "
          f"{_n(t['median_delay_records'], '.1f')} records, max {_n(t['max_delay_steps'], '.0f')} "
          f"steps / {_n(t['max_delay_records'], '.1f')} records")
    if len(t["per_interval"]) > 1:
        print(f"\n{'per logging interval':22} faults  recall  late  missed  healthy  with-FA  FA"
              f"   delay steps    delay records\n{'':62}median / max   median / max")
        for L, v in t["per_interval"].items():
            rec = "-" if v["recall"] is None else f"{v['recall']:.0%}"
            print(f"  every {L:3} steps       {v['faults']:6}  {rec:>6}  {v['late']:4}  "
                  f"{v['missed']:6}  {v['healthy']:7}  {v['healthy_with_false_alarms']:7}  "
                  f"{v['false_alarms_healthy']:3}  " + _delays(v))
    if t["unusable"]:
        print(f"unusable input (exit 2): {', '.join(t['unusable'])}")


def corpus_dir(arg: str | Path) -> Path:
    """``--corpus`` value -> directory (shorthands ``data``, ``hard``)."""
    return CORPORA.get(str(arg), Path(arg))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", "--data", dest="corpus", default=str(DATA),
                    help="corpus directory with labels.json, or 'data' (default: "
                    "tests/corpus/data) / 'hard' (tests/corpus/hard)")
    ap.add_argument("--hard", action="store_true", help="same as --corpus hard")
    ap.add_argument("--case", help="only cases whose name contains this")
    ap.add_argument("--rlguard", help="command to run rlguard (default: .venv/bin/rlguard, "
                    "else python -m rlguard)")
    ap.add_argument("--baseline-flag", default="--baseline",
                    help="rlguard check option taking METRIC=VALUE for regression cases")
    ap.add_argument("-j", "--jobs", type=int, default=min(os.cpu_count() or 2, 2))
    ap.add_argument("-v", "--verbose", action="store_true", help="print every alert")
    ap.add_argument("--json", type=Path, help="write per-case results and totals (per kind, "
                    "per logging interval) here")
    ap.add_argument("--healthy-runs", type=int, default=6, metavar="N",
                    help="then the healthy-run false-alarm table of bench/false_alarms.py over N "
                    "simulated healthy runs per family x noise x interval cell (default 6, 504 "
                    "runs; 0 skips it; 24 is the bench's own default)")
    args = ap.parse_args(argv)

    cmd = args.rlguard.split() if args.rlguard else rlguard_cmd()
    data = corpus_dir("hard" if args.hard else args.corpus)
    cases = json.loads((data / "labels.json").read_text())["cases"]
    cases = [c for c in cases if not args.case or args.case in c["name"]]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda c: check_case(cmd, data, c, args.baseline_flag), cases))
    scored = [score(r) for r in results]
    print_table(scored)
    if args.verbose:
        for r in scored:
            for a in r["alerts"]:
                print(f"  {r['case']['name']}: {json.dumps(a)}")
    t = totals(scored)
    print(f"\ncorpus: {data} ({len(scored)} cases)")
    print_totals(t)
    if args.json:
        slim = [{"case": r["case"]["name"], "format": r["case"]["format"],
                 "logging_steps": interval(r["case"]), "exit": r["code"], "found": r["found"],
                 "false_alarms": r["false"], "note": r["note"]} for r in scored]
        t_json = {**t, "per_interval": {str(L): v for L, v in t["per_interval"].items()}}
        args.json.write_text(json.dumps({"corpus": str(data), "cases": slim, "totals": t_json},
                                        indent=1) + "\n")
    if args.healthy_runs > 0:
        # the other side of the ledger: warnings per 100 healthy 1,000-step runs, per rule,
        # noise model, logging interval and family (the corpus's own healthy cases are too few)
        import false_alarms

        print("\n", flush=True)
        false_alarms.main(["--runs", str(args.healthy_runs), "-j", str(args.jobs)])
    return 1 if t["unusable"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
