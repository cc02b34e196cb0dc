"""report.md: the numbers of report.json, laid out the way a person reads a post-mortem."""
from __future__ import annotations

from ..core.numfmt import fmt
from .analysis import mode_words


def markdown(rep: dict) -> str:
    out = ["# rlguard report", ""]
    names = ", ".join(f"`{r['name']}`" for r in rep["runs"])
    out += [f"Runs: {names}. Watched metrics: {', '.join(rep['metrics']) or 'none found'}.", ""]
    if rep.get("findings"):
        out += ["## Findings", ""]
        out += [f"- **{f['kind']}**: {f['message']}" for f in rep["findings"]]
        out.append("")
    if rep.get("comparison"):
        out += _comparison(rep)
    for r in rep["runs"]:
        out += _run(r)
    if rep.get("plots"):
        out += ["## Plots", "", "Stars mark each run's best, dashed red lines a stop, red triangles the alerts on "
                "the plotted metric, dotted lines change points.", ""]
        out += [f"![{m}]({path})" for m, path in rep["plots"].items()]
        out.append("")
    elif rep.get("plots_note"):
        out += ["## Plots", "", rep["plots_note"][0].upper() + rep["plots_note"][1:] + ".", ""]
    return "\n".join(out) + "\n"


def _comparison(rep: dict) -> list[str]:
    out = ["## Runs side by side", ""]
    for m, comp in rep["comparison"].items():
        s, t = comp["summary"], comp["table"]
        names = [r["name"] for r in rep["runs"]]
        out += [f"### {m} ({mode_words(t['mode'])})", ""]
        extra = ["difference", "in noise sigma"] if len(names) == 2 else []
        out.append("| " + " | ".join(["step", *names, *extra]) + " |")
        out.append("|---" * (1 + len(names) + len(extra)) + "|")
        for row in t["rows"]:
            cells = [fmt(row["values"][n]) if n in row["values"] else "" for n in names]
            if len(names) == 2:
                d = row.get("diff_vs_first", {}).get(names[1])
                z = row.get("diff_vs_first_sigma", {}).get(names[1])
                cells += [f"{d:+.4g}" if d is not None else "", f"{z:+.1f}" if z is not None else ""]
            out.append(f"| {row['step']} | " + " | ".join(cells) + " |")
        out.append("")
        out += _verdicts(s)
        out.append("")
    return out


def _verdicts(s: dict) -> list[str]:
    """The verdicts against the noise, one line each, and the winners they name (or none)."""
    out = []
    first = s.get("versus")
    for n, v in s.get("verdicts", {}).items():
        gap = s["gap_vs_first_pct"][n]
        gap_words = "n/a (the first run's best is 0)" if gap is None else f"{gap:+.1f}%"
        out.append(f"- `{n}` vs `{first}`: best {gap_words}; **{v['sentence']}**.")
        out.append(f"- `{n}` vs `{first}`, reaching the best: {s['sooner'][n]['sentence']}.")
    if "ranking" in s:
        out.append(f"- ranking: {s['ranking']['sentence']}.")
    elif s.get("verdicts"):
        won = [f"{dim}: `{who}`" for dim, who in s.get("winners", {}).items()]
        out.append(f"- winners (only where the noise allows one): {'; '.join(won) if won else 'none'}.")
    return out


def _run(r: dict) -> list[str]:
    read = f"; read `{r['log']}`" if r.get("log") and r["log"] != r["path"] else ""
    out = [f"## Run `{r['name']}`", "", f"Log: `{r['path']}` ({r['format']}{read}), steps {r['steps'][0]}.."
           f"{r['steps'][1]}" if r["steps"] else f"Log: `{r['path']}`{read}", ""]
    if r["metrics"]:
        out += ["| metric | direction | best | at step | final | steps to within 1% of best | largest swing | "
                "noise sigma |", "|---|---|---|---|---|---|---|---|"]
        for m, s in r["metrics"].items():
            if not s.get("evaluations"):
                continue
            sw = s["swings"].get("largest_swing_pct")
            has_best = "best" in s
            out.append(f"| {label(m, r)} | {mode_words(s['mode'])} | {fmt(s['best']) if has_best else '-'} | "
                       f"{s['best_step'] if has_best else '-'} | {fmt(s['final'])} | "
                       f"{s['steps_to_within_1pct_of_best'] if has_best else '-'} | "
                       f"{'' if sw is None else f'{sw:.1f}%'} | "
                       f"{fmt(s['noise_sigma']) if s['noise_sigma'] else 'n/a'} |")
        out.append("")
        for m, s in r["metrics"].items():
            out += _metric_notes(m, s)
    out += ["### Alerts", ""]
    out += [f"- step {a['step']} **{a['severity']}** `{a['kind']}` ({a['rule']}) on {label(a['metric'], r)}: "
            f"{a['message']}" for a in r["alerts"]] or ["- none"]
    d = r["decision"]
    out += ["", "### Decision", ""]
    if d["stop"] is None:
        out.append(f"- {d['note']}.")
    else:
        keep = f"; keep the checkpoint of step {d['keep_checkpoint_step']}" if d["keep_checkpoint_step"] is not None else ""
        t = f" (about {d['time_saved_s'] / 3600:.1f} h)" if d.get("time_saved_s") else ""
        kind = d["kind"] if d.get("rule_kind") in (None, d["kind"]) else \
            f"{d['kind']}; decided by rule {d['rule']} ({d['rule_kind']})"
        if d.get("stopped_here"):
            out.append(f"- the run was stopped at step {d['stop']} ({kind}), where its log ends: rlguard "
                       f"(or someone) stopped it live{keep}.")
        else:
            out.append(f"- rlguard would have stopped at step {d['stop']} ({kind}){keep}: {d['steps_saved']} "
                       f"steps of the {d['last_step']} logged would have been saved{t}.")
        out.append(f"- reason: {d['reason']}")
    for line in (d.get("live") or {}).get("lines") or []:
        out.append(f"- {line}.")
    out.append("")
    return out


def label(m: str, r: dict) -> str:
    """A metric by the name its alerts use, the run's key as logged in brackets where it differs."""
    raw = r.get("logged_as", {}).get(m)
    return f"{m} [{raw}]" if raw else m


def _metric_notes(m: str, s: dict) -> list[str]:
    out = []
    sw = s["swings"]
    moves = [f"largest {word} {sw[key]['pct']:+.1f}% (step {sw[key]['from_step']} -> {sw[key]['to_step']})"
             for key, word in (("largest_fall", "fall"), ("largest_rise", "rise")) if key in sw]
    if moves:
        out.append(f"- {m}: {', '.join(moves)}.")
    wd = s.get("worst_drop")
    if wd:
        rec = "; it recovered within two evaluations" if wd["recovered_within_2_evals"] else ""
        where = (f"- {m}: deepest drop at step {wd['step']} ({fmt(wd['value'])}, {wd['pct']:+.1f}% from the best "
                 f"so far {fmt(wd['from_best'])} at step {wd['best_step']})")
        if wd["verdict"] == "cannot_tell":
            out.append(f"{where}: too few evaluations to judge it against the noise (4 or more needed).")
        else:
            z = f" is {wd['z']:.1f} sigma" if wd["z"] is not None else ""
            out.append(f"{where}{z}{rec}: **{wd['verdict']}**.")
    for c in s.get("change_points", []):
        out.append(f"- {m}: change point at step {c['step']}: level {fmt(c['before'])} -> {fmt(c['after'])} "
                   f"({c['pct']:+.1f}%).")
    if not s.get("change_points") and s.get("noise_sigma"):
        out.append(f"- {m}: no change point beyond the noise (ruptures, KernelCPD).")
    return out + ([""] if out else [])
