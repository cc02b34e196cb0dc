"""The MLflow file-store reader streams metric files (issue 25): memory stays flat whatever a
metric file's size (a 1.2 GB file once took 1.28 GB), and the records are the same as a
whole-file read gives: in step order, values within a step in timestamp order."""
from __future__ import annotations

import subprocess
import sys

MEASURE = """
import resource, sys
from rlguard.sources.mlflow_run import MlflowReader
n = last = 0
for rec in MlflowReader().records(sys.argv[1]):
    n, last = n + 1, rec.step
print(n, last, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def file_store_run(root, points: int, extra: list[bytes] = ()):
    run = root / "mlruns" / "0" / "abc"
    (run / "metrics" / "train").mkdir(parents=True)
    (run / "meta.yaml").write_text("run_id: abc\nstatus: 1\n")
    with open(run / "metrics" / "train" / "loss", "wb") as f:
        chunk = 100_000
        for start in range(0, points, chunk):
            f.write(b"".join(b"%d %r %d\n" % (1_700_000_000_000 + s, 0.5 + (s % 7) / 100, s)
                             for s in range(start, min(points, start + chunk))))
        f.writelines(extra)
    (run / "metrics" / "reward").write_bytes(b"".join(b"%d 0.25 %d\n" % (1_700_000_000_000 + s, s)
                                                      for s in range(0, points, 1000)))
    return run


def measure(run) -> tuple[int, int, int]:
    out = subprocess.run([sys.executable, "-c", MEASURE, str(run)], capture_output=True, text=True, check=True)
    n, last, mb = map(int, out.stdout.split())
    return n, last, mb


def test_a_big_metric_file_is_read_in_constant_memory(tmp_path):
    small = file_store_run(tmp_path / "small", 20_000)
    big = file_store_run(tmp_path / "big", 3_000_000)  # about 76 MB of points
    assert (big / "metrics" / "train" / "loss").stat().st_size > 70 << 20
    n_small, _, mb_small = measure(small)
    n_big, last, mb_big = measure(big)
    assert n_small == 20_000 and n_big == 3_000_000 and last == 2_999_999
    assert mb_big - mb_small < 20, (mb_small, mb_big)  # a whole-file read: +76 MB of bytes alone


def test_streamed_records_keep_step_and_timestamp_order_and_bad_lines(tmp_path):
    """A file logged out of step order, a value logged twice in a step (the later wins), an
    over-long line and a partial last line."""
    from rlguard.sources.mlflow_run import MlflowReader

    run = file_store_run(tmp_path, 5, [b"1700000000009 9.5 2\n", b"x" * 10_000 + b"\n", b"1700000000010 0.1"])
    (run / "metrics" / "kl").write_bytes(b"1700000000003 0.3 3\n1700000000001 0.1 1\n")  # out of order
    reader = MlflowReader()
    recs = list(reader.records(str(run)))
    assert [r.step for r in recs] == [0, 1, 2, 3, 4]
    assert recs[2].metrics["train/loss"] == 9.5  # logged again later at step 2: the later value
    assert recs[1].metrics["kl"] == 0.1 and recs[3].metrics["kl"] == 0.3
    assert reader.stats.bad_lines == 1 and "over 4096 bytes" in reader.stats.first_bad_reason
    assert reader.stats.lines == 9  # points read: 6 of train/loss, 1 of reward, 2 of kl
