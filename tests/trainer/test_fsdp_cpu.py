"""FSDP2 sharding of the trainer's model wrapper on 2 CPU ranks (gloo): micro-batched gradients
equal the unsharded ones, generation under gathered weights equals unsharded generation.
(Accelerate itself enables FSDP only on GPU backends; see fsdp2_cpu_worker.py.)"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed.fsdp")


def test_fsdp2_sharded_wrapper_matches_unsharded(tmp_path):
    worker = Path(__file__).with_name("fsdp2_cpu_worker.py")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                        "--master_addr", "127.0.0.1", "--master_port", str(port), str(worker), str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1)]
    for res in results:
        assert res["params"] > 10 and res["grad_sum"] > 0
        assert res["max_grad_diff"] < 1e-5, res
        assert res["same_generation"], res
