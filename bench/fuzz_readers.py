"""Hostile input for every reader: a seeded mutator over example logs of each format.

For each format, ``--cases`` mutated copies of a real-looking seed log (byte flips, truncation,
huge numbers, deep nesting, very long lines, NUL bytes, bad UTF-8, steps going backwards or
huge, null/empty columns, ``.gz`` of it, a gzip bomb, a record of up to 700,000 distinct keys,
an integer past int64 in each numeric field of every line) are read, 15% of them as another
format (``--input-format``), through the reader's Python API
and replayed through the watchdog, as ``rlguard check`` does. Reported per format: cases,
uncaught exceptions (the target is 0), p99 time per case, and the process's peak RSS; then a
sample through the ``rlguard check`` CLI (half with a forced ``--input-format``) whose exit
codes must be 0, 1 or 2, each case under 10 s and 500 MB, each exit 2 one line naming the file.

    python bench/fuzz_readers.py [--cases 100000] [--seed 0] [--formats jsonl,csv,...] [--cli 200]

``tests/sources/test_fuzz_readers.py`` runs the same harness with a small budget in ``make test``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from rlguard.engine.columns import Naming, columnize
from rlguard.core.errors import RLGuardError
from rlguard.sources import READERS, open_reader
from rlguard.sources.cap import MetricCap
from rlguard.rules.vocab import Vocabulary
from rlguard.engine.watchdog import Watchdog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from wandb_frames import frame  # noqa: E402  (the tests' W&B writer)

VOCAB = Vocabulary()


def _rows(n: int = 30) -> list[dict]:
    return [{"step": s, "loss": 0.5 - 0.001 * s, "reward": 0.2 + 0.01 * s, "reward_std": 0.3, "kl": 0.01 * s,
             "eval/loss": None if s % 10 else 0.4} for s in range(1, n + 1)]


def seeds() -> dict[str, bytes]:
    """One small, valid log per format."""
    rows = _rows()
    out = {
        "jsonl": "".join(json.dumps(r) + "\n" for r in rows).encode(),
        "trainer_state": json.dumps({"global_step": 30, "log_history": [
            {k if k != "eval/loss" else "eval_loss": v for k, v in r.items() if v is not None} for r in rows]},
            indent=2).encode(),
        "verl_jsonl": "".join(json.dumps({"step": r["step"], "data": {"actor/kl_loss": r["kl"],
                                                                          "critic/score/mean": r["reward"]}}) + "\n"
                              for r in rows).encode(),
        "verl_console": "".join(f"(main_task pid=1) step:{r['step']} - actor/kl_loss:{r['kl']:.3f} - "
                                f"critic/score/mean:{r['reward']:.3f}\n" for r in rows).encode(),
        "hf_console": "".join(f"{{'loss': {r['loss']:.4f}, 'grad_norm': 0.5, 'reward': {r['reward']:.3f}, "
                              f"'epoch': {r['step'] / 100}}}\n {r['step']}%|#  | {r['step']}/100\n"
                              for r in rows).encode(),
        "csv": ("step,loss,reward,eval/loss\n" + "".join(
            f"{r['step']},{r['loss']},{r['reward']},{'' if r['eval/loss'] is None else r['eval/loss']}\n"
            for r in rows)).encode(),
    }
    out["log_history_list"] = json.dumps([{k if k != "eval/loss" else "eval_loss": v for k, v in r.items()
                                            if v is not None} for r in rows], indent=2).encode()
    out["mlflow"] = _mlflow_bytes(rows)
    try:
        out["wandb"] = _wandb_bytes(rows)
    except RLGuardError:  # the wandb extra is not installed: its reader cannot run either
        pass
    try:
        from tensorboardX import SummaryWriter

        with tempfile.TemporaryDirectory() as d:
            w = SummaryWriter(d)
            for r in rows:
                w.add_scalar("train/loss", r["loss"], r["step"])
                w.add_scalar("train/reward", r["reward"], r["step"])
            w.close()
            out["tensorboard"] = next(Path(d).glob("events.out.tfevents.*")).read_bytes()
    except ImportError:
        pass
    return out


def _wandb_bytes(rows: list[dict]) -> bytes:
    """A W&B transaction log of the rows: one history record per row, framed as ``wandb`` writes
    it (tests/sources/wandb_frames.py). Needs the wandb extra for its protobuf classes."""
    from rlguard.sources.wandb_run import record_class

    record = record_class("fuzz")
    records = []
    for r in rows:
        rec = record()
        for k, v in {**{k: v for k, v in r.items() if k != "step"}, "train/global_step": r["step"]}.items():
            item = rec.history.item.add()
            item.key, item.value_json = k, json.dumps(v)
        records.append(rec.SerializeToString())
    return frame(records)


def _mlflow_bytes(rows: list[dict]) -> bytes:
    """An MLflow file-store run packed as one blob (``write_case`` unpacks it into a run dir):
    ``<metric path>\n<timestamp value step lines>`` sections separated by ``\x1e``, so the
    mutations hit file names and metric lines alike."""
    parts = []
    for key, col in (("train/loss", "loss"), ("train/reward", "reward"), ("eval/loss", "eval/loss")):
        lines = "".join(f"{1700000000000 + r['step']} {r[col]} {r['step']}\n" for r in rows if r[col] is not None)
        parts.append(f"{key}\n{lines}")
    return "\x1e".join(parts).encode()


def write_case(d: Path, fmt: str, data: bytes) -> Path:
    """Where a mutated case goes: a file, or for MLflow a file-store run dir built from the blob."""
    if fmt != "mlflow":
        path = d / f"case.{fmt}"
        path.write_bytes(data)
        return path
    import shutil

    run = d / "mlruns" / "0" / "fuzzrun"
    shutil.rmtree(run.parent.parent, ignore_errors=True)
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text("run_id: fuzzrun\nexperiment_id: '0'\nstatus: 1\n")
    for i, part in enumerate(data.split(b"\x1e")):
        name, _, body = part.partition(b"\n")
        safe = name.decode("utf-8", "replace").replace("\x00", "").strip("/.") or f"m{i}"
        target = run / "metrics" / safe
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
        except (OSError, ValueError):  # a mutated name the filesystem refuses: a plain one
            (run / "metrics" / f"m{i}").write_bytes(body)
    return run


# ---------------------------------------------------------------------- mutations
def _flip(rng, b: bytes) -> bytes:
    a = bytearray(b)
    for _ in range(rng.randint(1, 8)):
        if a:
            a[rng.randrange(len(a))] = rng.randrange(256)
    return bytes(a)


def _cut(rng, b: bytes) -> bytes:
    return b[: rng.randrange(len(b) + 1)]


def _insert(rng, b: bytes, what: bytes) -> bytes:
    i = rng.randrange(len(b) + 1)
    return b[:i] + what + b[i:]


def _line(rng, b: bytes, what: bytes) -> bytes:
    lines = b.split(b"\n")
    lines.insert(rng.randrange(len(lines) + 1), what)
    return b"\n".join(lines)


HUGE = [b"1" + b"0" * 20, b"9" * 400, b"1e999", b"-1e999", b"1" * 5000, b"-5", b"NaN", b"Infinity", b"0x10"]
#: integers just past int64 / uint64 and far past (a step of 2**70 reached check's int64 step array)
PAST_INT64 = [b"9223372036854775808", b"18446744073709551616", b"1180591620717411303424", b"-9223372036854775809",
              b"1" + b"0" * 40]
_NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


def key_bomb(fmt: str, n: int) -> bytes:
    """One record of ``n`` distinct metric names in the format's own syntax (the shape that cost
    ``check`` 24.7 s and 1.15 GB at 700,000 keys before its metric cap)."""
    keys = [f"k{i}" for i in range(n)]
    if fmt == "hf_console":
        return ("{'loss': 0.5, " + ", ".join(f"'{k}': 0.{i % 10}" for i, k in enumerate(keys)) + "}").encode()
    if fmt == "verl_console":
        return ("(main_task pid=1) step:31 - " + " - ".join(f"{k}:0.{i % 10}" for i, k in enumerate(keys))).encode()
    if fmt == "csv":
        return ("step," + ",".join(keys) + "\n31," + ",".join("0.5" for _ in keys)).encode()
    if fmt == "verl_jsonl":
        return json.dumps({"step": 31, "data": {k: 0.5 for k in keys}}).encode()
    body = json.dumps({"step": 31, **{k: float(i % 7) for i, k in enumerate(keys)}})
    return body.encode()


def past_int64(rng, seed: bytes) -> bytes:
    """The j-th number of every line (a step, an epoch, a value, a timestamp: every numeric field
    in turn) replaced by an integer past int64; half the time the JSON step key becomes an
    integer ``epoch`` and a NaN token sends the line to the stdlib parser, which keeps the
    integer whole (orjson reads it as a float)."""
    j, big = rng.randrange(6), rng.choice(PAST_INT64)
    out = []
    for line in seed.split(b"\n"):
        found = list(_NUMBER.finditer(line))
        if len(found) > j:
            m = found[j]
            line = line[:m.start()] + big + line[m.end():]
        out.append(line)
    data = b"\n".join(out)
    if rng.random() < 0.5:
        data = data.replace(b'"step": ', b'"epoch": ').replace(b'"loss": ', b'"x": NaN, "loss": ', 2)
    return data


def mutate(rng: random.Random, fmt: str, seed: bytes, heavy: bool = True) -> bytes:
    """One mutated copy; ``heavy=False`` keeps the big cases small (the test's quick budget)."""
    big = (lambda *sizes: rng.choice(sizes)) if heavy else (lambda *sizes: min(sizes) // 10)
    m = rng.randrange(14)
    if m in (3, 4, 9, 11, 12) and heavy and rng.random() > 0.05:
        m = rng.choice([0, 1, 2, 5, 6, 7, 8])  # the costly cases (MB lines, bombs) in 1 of 20 draws
    if m == 0:
        return _flip(rng, seed)
    if m == 1:
        return _cut(rng, seed)
    if m == 2:  # a huge or odd number where a step or a value was
        target = rng.choice([b'"step": ', b"step:", b"'loss': ", b'"loss": ', b"\n", b","])
        i = seed.find(target, rng.randrange(max(1, len(seed))))
        if i < 0:
            return _insert(rng, seed, rng.choice(HUGE))
        j = i + len(target)
        end = j
        while end < len(seed) and seed[end:end + 1] not in b",}\n -":
            end += 1
        return seed[:j] + rng.choice(HUGE) + seed[end:]
    if m == 3:  # deep nesting
        depth = rng.choice([100, 1000, 100_000]) if heavy else rng.choice([100, 10_000])
        return _line(rng, seed, b'{"step": 7, "x": ' + b"[" * depth + b"]" * depth + b"}")
    if m == 4:  # a very long line
        return _line(rng, seed, b'{"step": 8, "note": "' + b"x" * big(10_000, 1_000_000) + b'"}')
    if m == 5:  # NUL bytes and control characters
        return _insert(rng, seed, bytes(rng.randrange(32) for _ in range(rng.randint(1, 64))))
    if m == 6:  # bad UTF-8
        return _insert(rng, seed, rng.choice([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x28\x8c\x28"]))
    if m == 7:  # steps going backwards / repeated lines
        lines = seed.split(b"\n")
        k = rng.randrange(max(1, len(lines)))
        return b"\n".join(lines + lines[:k])
    if m == 8:  # a column null/empty everywhere
        return seed.replace(b'"loss": ', b'"loss": null, "was": ').replace(b",0.", b",,0.", 3)
    if m == 9:  # digits of a console value, long
        return _line(rng, seed, b"{'loss': " + b"1" * big(16_000, 100_000) + b", 'epoch': 1.0}")
    if m == 12:  # distinct-key bomb: one record of thousands to 700,000 names
        n = rng.choice([2_000, 50_000, 700_000]) if heavy else rng.choice([100, 3_000])
        return _line(rng, seed, key_bomb(fmt, n)) if fmt != "csv" else key_bomb(fmt, n) + b"\n" + seed
    if m == 13:  # integers past int64 in one numeric field of every line
        return past_int64(rng, seed)
    if m == 10:  # gzip of a mutation
        return gzip.compress(mutate(rng, fmt, seed, heavy))
    # a small gzip bomb: a few MB of one line (bounded here to keep the bench quick)
    return gzip.compress(b"{" + b"0" * big(1 << 20, 8 << 20))


# ---------------------------------------------------------------------- running
#: seeds that are another form of a reader's format
READER_OF = {"log_history_list": "trainer_state"}


def read_case(path: Path, fmt: str, judge: bool = True, forced: str | None = None) -> None:
    """What `rlguard check` does with a file, minus the report: read it (with ``forced``, as
    another format: ``--input-format``), keep at most 2,000 metric names (check's MetricCap),
    build its columns, and (``judge``) run the rules on them. The bench builds columns only: the
    rules are tested elsewhere, and they would make 100,000 cases per format take hours."""
    reader = open_reader(str(path), forced or READER_OF.get(fmt, fmt))
    cap = MetricCap()
    if judge:
        wd = Watchdog(run="fuzz")
        for batch in reader.batches(str(path), 5000, columnar=True):
            wd.ingest(cap.bound(batch))
        return
    naming, prev, seq = Naming(VOCAB), None, 0
    for batch in reader.batches(str(path), 5000, columnar=True):
        chunk = columnize(cap.bound(batch), naming, seq, prev)
        seq, prev = seq + len(batch), chunk.last


def run(formats: dict[str, bytes], cases: int, seed: int, progress: bool = True, heavy: bool = True,
        judge: bool = True) -> dict[str, dict]:
    rng = random.Random(seed)
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for fmt, base in formats.items():
            times, crashes, first = [], 0, None
            t_fmt = time.time()
            for i in range(cases):
                data = mutate(rng, fmt, base, heavy)
                path = write_case(Path(d), fmt, data)
                forced = rng.choice(sorted(READERS)) if rng.random() < 0.15 else None  # --input-format
                t0 = time.perf_counter()
                try:
                    read_case(path, fmt, judge, forced)
                except RLGuardError:
                    pass  # a clear, named error is the right answer to unusable input
                except Exception:  # noqa: BLE001 - what the bench counts
                    crashes += 1
                    if first is None:
                        first = traceback.format_exc(limit=4)
                        (Path(d).parent / f"rlguard-fuzz-{fmt}-crash.bin").write_bytes(data)
                times.append(time.perf_counter() - t0)
                if progress and (i + 1) % max(1, cases // 10) == 0:
                    print(f"  {fmt}: {i + 1}/{cases} cases, {crashes} uncaught, {time.time() - t_fmt:.0f} s",
                          file=sys.stderr, flush=True)
            times.sort()
            results[fmt] = {"cases": cases, "uncaught": crashes, "p99_ms": 1000 * times[int(0.99 * (len(times) - 1))],
                            "max_ms": 1000 * times[-1], "first": first}
    return results


#: what one `rlguard check` of a hostile case may cost (issue 52's bar)
MAX_SECONDS, MAX_MB = 10.0, 500


def cli_sample(formats: dict[str, bytes], n: int, seed: int, heavy: bool = True,
               worst: dict | None = None) -> dict[int, int]:
    """Exit codes of `rlguard check` on n mutated files (0/1: a verdict, 2: unusable input), half
    of them with a forced ``--input-format``. ``worst`` gets the slowest case's seconds, the
    largest peak RSS (MB) of a check, the cases over 10 s or 500 MB, and the stderr lines of
    exit-2 answers that are not one line naming the file (each capped at 5)."""
    rng = random.Random(seed + 1)
    codes: dict[int, int] = {}
    worst = {} if worst is None else worst
    worst.update(seconds=0.0, mb=0.0, over=[], unnamed=[])
    exe = str(Path(sys.executable).with_name("rlguard"))
    wrap = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
            "sys.stderr.write(r.stderr); print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    with tempfile.TemporaryDirectory() as d:
        for i in range(n):
            (Path(d) / f"c{i}").mkdir()
            fmt = rng.choice(sorted(formats))
            path = write_case(Path(d) / f"c{i}", fmt, mutate(rng, fmt, formats[fmt], heavy))
            forced = ["--input-format", rng.choice(sorted(READERS))] if rng.random() < 0.5 else []
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-c", wrap, exe, "check", str(path), *forced], capture_output=True,
                               text=True, timeout=120)
            took = time.perf_counter() - t0
            rc_text, kb = p.stdout.split()
            rc, mb = int(rc_text), int(kb) / 1024
            codes[rc] = codes.get(rc, 0) + 1
            worst["seconds"], worst["mb"] = max(worst["seconds"], took), max(worst["mb"], mb)
            if (took > MAX_SECONDS or mb > MAX_MB) and len(worst["over"]) < 5:
                worst["over"].append(f"{fmt} {' '.join(forced)}: {took:.1f} s, {mb:.0f} MB")
            lines = p.stderr.strip().splitlines()
            if rc == 2 and (len(lines) != 1 or str(path) not in lines[0] and "--" not in lines[0]):
                if len(worst["unnamed"]) < 5:
                    worst["unnamed"].append(f"{fmt} {' '.join(forced)}: {p.stderr.strip()[:200]!r}")
    return codes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=100_000, help="cases per format")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--formats", help="comma-separated subset (default: all)")
    ap.add_argument("--cli", type=int, default=200, help="cases through the rlguard check CLI")
    ap.add_argument("--judge", action="store_true", help="also run the rules on every case (slow)")
    args = ap.parse_args(argv)
    formats = seeds()
    if args.formats:
        formats = {k: v for k, v in formats.items() if k in args.formats.split(",")}
    res = run(formats, args.cases, args.seed, judge=args.judge)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'format':14s} {'cases':>8s} {'uncaught':>9s} {'p99 ms':>8s} {'max ms':>8s}")
    for fmt, r in res.items():
        print(f"{fmt:14s} {r['cases']:8d} {r['uncaught']:9d} {r['p99_ms']:8.2f} {r['max_ms']:8.0f}")
        if r["first"]:
            print("  first uncaught:\n" + "\n".join("    " + ln for ln in r["first"].splitlines()))
    print(f"peak RSS of the fuzzing process: {peak:.0f} MB")
    if args.cli:
        worst: dict = {}
        codes = cli_sample(formats, args.cli, args.seed, worst=worst)
        print(f"rlguard check on {args.cli} mutated files (half with a forced --input-format): exit codes "
              f"{dict(sorted(codes.items()))} (anything but 0, 1, 2 is a failure); slowest {worst['seconds']:.1f} s, "
              f"largest peak {worst['mb']:.0f} MB (bar: {MAX_SECONDS:g} s, {MAX_MB} MB)")
        for line in worst["over"]:
            print(f"  over the bar: {line}")
        for line in worst["unnamed"]:
            print(f"  exit 2 not one line naming the file: {line}")
        if set(codes) - {0, 1, 2} or worst["over"] or worst["unnamed"]:
            return 1
    return 1 if any(r["uncaught"] for r in res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
