"""benchmarks/gpu_check.sh without a GPU: one line says so, then a CPU self-test runs every section of the script
(tiny models, a few steps) and exits 0; the table it writes holds each correctness check passed and every
throughput measurement of the self-test's schedule."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT


@pytest.mark.slow
def test_without_a_gpu_the_check_says_so_and_self_tests_its_plumbing(tiny_shards, tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    cmd = ["bash", "benchmarks/gpu_check.sh", "--shards-128", str(tiny_shards / "train"), "--out", str(tmp_path)]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout.splitlines()[0].startswith("no CUDA GPU here: running the CPU self-test")
    summary = (tmp_path / "summary.md").read_text()
    for architecture in ("bert", "modernbert"):
        for layout in ("padded", "packed"):
            assert f"check: {architecture} {layout}: cpu bf16 (sdpa) vs CPU fp32 | ok" in summary
        assert f"{architecture} tiny 32 | bertprep | packed | eager | sdpa |" in summary
        assert f"{architecture} tiny 32 | transformers | padded, same instances as packed | eager | sdpa |" in summary
    assert "check: train bert tiny 6 steps (packed) | ok" in summary
    assert "bert tiny 32 | bertprep | packed | compiled | sdpa |" in summary
    assert "FAILED" not in summary and "| error |" not in summary
