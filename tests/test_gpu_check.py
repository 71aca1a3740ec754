"""benchmarks/gpu_check.sh without a GPU: one line says so, then a CPU self-test runs every section of the script
(tiny models, a few steps) and exits 0; the table it writes holds each correctness check passed and every
throughput measurement of the self-test's schedule."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT


@pytest.fixture(scope="module")
def self_test_run(tiny_shards, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``benchmarks/gpu_check.sh`` without a GPU into a fresh ``--out``, run once for the tests below: the
    finished process and its ``--out`` (which holds ``run-1``; a test may add runs of its own beside it)."""
    out = tmp_path_factory.mktemp("gpu-check-out")
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    cmd = ["bash", "benchmarks/gpu_check.sh", "--shards-128", str(tiny_shards / "train"), "--out", str(out)]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    return result, out


@pytest.mark.slow
def test_without_a_gpu_the_check_says_so_and_self_tests_its_plumbing(self_test_run):
    result, out = self_test_run
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout.splitlines()[0].startswith("no CUDA GPU here: running the CPU self-test")
    assert result.stdout.splitlines()[1] == f"gpu_check: results of this run in {out / 'run-1'}"
    summary = (out / "run-1" / "summary.md").read_text()
    for architecture in ("bert", "modernbert"):
        for layout in ("padded", "packed"):
            assert f"check: {architecture} {layout}: cpu bf16 (sdpa) vs CPU fp32 | ok" in summary
        assert f"{architecture} tiny 32 | bertprep | packed | eager | sdpa |" in summary
        assert f"{architecture} tiny 32 | transformers | padded, same instances as packed | eager | sdpa |" in summary
    assert "check: train bert tiny 6 steps (packed) | ok" in summary
    assert "bert tiny 32 | bertprep | packed | compiled | sdpa |" in summary
    assert "FAILED" not in summary and "| error |" not in summary


# ------------------------------------------------------------------------ fast: inputs, masking, argv, sections


@functools.cache
def _gpu_check():
    """benchmarks/gpu_check.py as a module (it is a script, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", REPO_ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--out"], "gpu_check.sh: --out needs a value (a folder)"),
        (["--shards-128", "nope"], "gpu_check.sh: nope is not a shard folder (no manifest.json); pass make-shards"),
        (["--out", "FILE", "--shards-128", "nope"], "gpu_check.sh: --out FILE is a file, not a folder"),
    ],
)
def test_bad_arguments_are_one_line_each(tmp_path, args, expected):
    (tmp_path / "FILE").write_text("not a folder")
    cmd = ["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), *args]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(expected), result.stderr


def test_the_python_side_names_a_bad_folder_in_one_line(tmp_path, capsys):
    (tmp_path / "FILE").write_text("not a folder")
    check = _gpu_check()
    assert check.main(["--shards-128", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    assert check.main(["--shards-128", str(tmp_path), "--out", str(tmp_path / "FILE")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"gpu_check: --shards-128 {tmp_path / 'nope'}: ")
    assert lines[1] == f"gpu_check: --out {tmp_path / 'FILE'} is a file, not a folder; name a folder for the results"


def test_rows_of_dynamic_shards_are_masked_as_training_masks_them(tmp_path):
    """Before, gpu_check read dynamic shards' rows unmasked: no target, a NaN loss, "FAILED: non-finite loss"."""
    from shard_factory import write_shard_dir

    write_shard_dir(tmp_path / "dyn", num_shards=1, rows_per_shard=16, masking="dynamic")
    check = _gpu_check()
    rows = check.read_rows(str(tmp_path / "dyn"), 16)
    assert len(rows) == 16 and all((row["masked_lm_ids"] != -100).any() for row in rows)
    specials = check.read_shard_info(str(tmp_path / "dyn")).special_token_ids
    _, model = check.bertprep_model("bert", "tiny", 64, specials)
    batch = check.to_tensors(check.collate_numpy(rows))
    assert torch.isfinite(check.PretrainingModel(model)(**batch).training_loss(1.0))


def test_the_measurement_filter_never_reaches_inductor_s_generated_code(monkeypatch):
    """inductor pastes the value after "--only" in sys.argv, unescaped, into every module it generates
    (``torch._inductor.utils.get_benchmark_name``): a name with an apostrophe failed every compilation with
    "unterminated string literal". The filter is ``--select``, which inductor does not read."""
    from torch._inductor.utils import get_benchmark_name

    argv = ["gpu_check.py", "--shards-128", "s", "--out", "o", "--select", "bert base 128 | transformers' BERT"]
    monkeypatch.setattr(sys, "argv", argv)
    assert _gpu_check().parse(argv[1:]).select.endswith("transformers' BERT")
    assert get_benchmark_name() is None


def test_the_self_test_honours_steps_0_and_train_steps_0(tiny_shards, tmp_path):
    out = tmp_path / "out"
    argv = ["--shards-128", str(tiny_shards / "train"), "--out", str(out), "--self-test", "--steps", "0"]
    assert _gpu_check().main([*argv, "--train-steps", "0"]) == 0
    summary = (out / "run-1" / "summary.md").read_text()
    assert "check: bert padded: cpu bf16 (sdpa) vs CPU fp32 | ok" in summary  # the correctness section ran
    assert "| bertprep |" not in summary and "check: train" not in summary  # no throughput, no train check


@pytest.mark.slow  # ~4 s on 2 busy cores: a bertprep train process (make test runs it; test-fast leaves it out)
def test_a_second_run_into_the_same_out_gets_fresh_run_folders(self_test_run, tiny_shards, capsys):
    """gpu.md asks for the check, then once more with another --compile-mode, into the same --out: the second run
    failed its own train check ("train-bert already holds checkpoints of a run"). Each run now writes into a
    fresh ``OUT/run-N`` named in its first line; the first run's table stays as it was. (The first run: the
    script's self-test above, 6 train steps; the second here, 2.)"""
    result, out = self_test_run
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    first = (out / "run-1" / "summary.md").read_text()
    argv = ["--shards-128", str(tiny_shards / "train"), "--out", str(out), "--self-test", "--steps", "0"]
    assert _gpu_check().main([*argv, "--train-steps", "2", "--compile-mode", "reduce-overhead"]) == 0
    second = (out / "run-2" / "summary.md").read_text()
    assert "check: train bert tiny 6 steps (packed) | ok" in first and "FAILED" not in first
    assert "check: train bert tiny 2 steps (packed) | ok" in second and "FAILED" not in second
    assert (out / "run-1" / "summary.md").read_text() == first
    assert (out / "run-1" / "train-bert" / "metrics.jsonl").is_file()
    assert (out / "run-2" / "train-bert" / "metrics.jsonl").is_file()
    starts = [line for line in result.stdout.splitlines() if line.startswith("gpu_check: results of")]
    starts += [line for line in capsys.readouterr().out.splitlines() if line.startswith("gpu_check: results of")]
    assert starts == [f"gpu_check: results of this run in {out / f'run-{n}'}" for n in (1, 2)]
