"""``make demo`` (demo/demo.py): every step from the demo books to an exported fine-tuned model succeeds, shrunk
through the script's own options; and the book task it fine-tunes on is reproducible."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

DEMO = REPO_ROOT / "demo"
STEPS = [
    "build-vocab", "make-shards", "train", "fill-mask", "make-shards (MiniLM)", "train (MiniLM)", "fill-mask (MiniLM)",
    "plot", "book task", "finetune", "export",
]  # fmt: skip


@pytest.mark.slow
def test_demo_runs_every_step_and_prints_the_summary(tmp_path, minilm_dir):
    out = tmp_path / "demo-out"
    proc = subprocess.run(
        [sys.executable, DEMO / "demo.py", "--out", out, "--steps", "6", "--vocab-size", "600",
         "--sentences-per-book", "20", "--finetune-epochs", "1", "--cpt-steps", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for i, step in enumerate(STEPS, 1):  # one line per step, with its time
        pattern = rf"\[{i}/{len(STEPS)}\] {re.escape(step)}\s+\d+\.\d s  \S"
        assert any(re.match(pattern, line) for line in lines), (step, proc.stdout)
    summary = proc.stdout[proc.stdout.index("Summary") :]
    assert all(step in summary for step in STEPS) and re.search(r"total\s+\d+\.\d s", summary)
    assert "vocab of 600 word pieces" in proc.stdout and "held-out MLM accuracy at [MASK]" in proc.stdout
    assert re.search(r"dev accuracy \d\.\d+ \(majority-class baseline \d\.\d+", proc.stdout)
    assert "max |logit diff|" in proc.stdout and ": OK" in proc.stdout and "docs/pretraining.md" in summary
    assert (out / "hf" / "config.json").is_file() and (out / "logs" / "finetune.log").is_file()
    # The continued pre-training started from all-MiniLM-L6-v2 (its 30,522-piece vocab), and both runs are drawn.
    assert "all-MiniLM-L6-v2's 30,522-piece vocab" in proc.stdout and "skipped" not in proc.stdout
    assert (out / "continued" / "metrics.jsonl").is_file()
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "pretrain and continued" in proc.stdout
    # A rerun replaces its own earlier output; a folder that is not a demo's is refused.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    refused = subprocess.run([sys.executable, DEMO / "demo.py", "--out", tmp_path / "mine"], capture_output=True)
    assert refused.returncode != 0 and (tmp_path / "mine" / "keep.txt").exists()


def test_book_task_is_reproducible_and_capped(tmp_path):
    sys.path.insert(0, str(DEMO))
    try:
        from make_book_task import main, read_tsv
    finally:
        sys.path.remove(str(DEMO))
    for name in ("a", "b"):
        main(["-o", str(tmp_path / name), "--sentences-per-book", "50", "--seed", "3"])
    for split in ("train.tsv", "dev.tsv"):
        assert (tmp_path / "a" / split).read_bytes() == (tmp_path / "b" / split).read_bytes()
    train, dev = read_tsv(tmp_path / "a" / "train.tsv"), read_tsv(tmp_path / "a" / "dev.tsv")
    labels = {"blake-poems", "chesterton-thursday", "shakespeare-macbeth"}
    assert {label for _, label in train} == labels and {label for _, label in dev} == labels
    assert len(train) + len(dev) == 150 and len(dev) == 30 and not {s for s, _ in train} & {s for s, _ in dev}
    assert all(5 <= len(s.split()) <= 40 and "\t" not in s for s, _ in train + dev)
