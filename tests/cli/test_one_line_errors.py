"""Each command names what is wrong with its input in one line and leaves the user's files as they were: the
real ``bertprep`` CLI, run in this process (``cli_factory.invoke``: click's runner).

Each test puts a command where it used to lose the user's files (writing over what it reads), hang or end in
a traceback, and asserts: the run ends within a bound (invoke's timeout), with the expected exit status,
with one ``Error:`` line that names the file or option (no ``Traceback`` on stderr), and with what the user had
byte-for-byte as before. None of that is about the process: the exit status is click's (``invoke`` gives an
uncaught exception status 1 and its traceback on stderr, as the interpreter would), the line is what the
command writes to stderr, and the files are on disk; a subprocess would only add ~3 s of CPU a run to import
torch and Beam. Tests that train, fine-tune or run a model are marked slow.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from cli_factory import error_line, snapshot
from cli_factory import invoke as bertprep  # (120 s: every command here fails or finishes within seconds)
from conftest import FIXTURES, need_module

need_module("torch")

VOCAB = FIXTURES / "finetune" / "vocab.txt"
SQUAD = FIXTURES / "finetune" / "squad_tiny.json"


@pytest.fixture(scope="module")
def run(tiny_checkpoint_run) -> Path:
    """The session's tiny pre-training run (read only)."""
    return tiny_checkpoint_run


@pytest.fixture(scope="module")
def squad_v2_model(run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("squad") / "ft"
    proc = bertprep(
        "finetune", "--task", "squad", "--squad-version", "2.0", "--init-from", run, "--train-file", SQUAD,
        "-o", out, "--max-seq-length", 48, "--doc-stride", 16, "--max-query-length", 8, "--num-train-epochs", 1,
        "--batch-size", 8, "--no-progress", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out


def test_extract_features_refuses_to_write_over_the_weights_it_reads(run, tmp_path):
    """Before: `--output RUN/checkpoints/step-N/model.safetensors --overwrite` replaced the weights it read."""
    sentences = tmp_path / "s.txt"
    sentences.write_text("the city was in the river\n")
    before = snapshot(run)
    weights = next(run.glob("checkpoints/step-*/model.safetensors"))
    line = error_line(
        bertprep("extract-features", "--model", run, "--input", sentences, "--output", weights, "--overwrite")
    )
    assert str(weights) in line and "lies inside --model" in line and "--output" in line
    assert snapshot(run) == before


@pytest.mark.slow  # a real fine-tuning / training / inference run (10-35 s on 2 shared cores)
def test_predict_refuses_a_null_odds_side_file_over_its_input(squad_v2_model, tmp_path):
    """Before: SQuAD v2.0 `predict --output preds.json` wrote preds.null_odds.json over an input of that name."""
    data = tmp_path / "preds.null_odds.json"
    data.write_bytes(SQUAD.read_bytes())
    line = error_line(
        bertprep("predict", "--model", squad_v2_model, "--input", data, "--output", tmp_path / "preds.json",
                 "--no-progress"),
        status=1,
    )  # fmt: skip
    assert f"would write {data}, which is --input {data}" in line and "choose a --output" in line
    assert data.read_bytes() == SQUAD.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["preds.null_odds.json"]


@pytest.mark.slow  # ~5 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_build_vocab_refuses_an_input_it_would_replace(tmp_path):
    out = tmp_path / "vocab"
    out.mkdir()
    corpus = out / "tokenizer_config.json"  # not a "vocab already here" file: only this check stops it
    corpus.write_text("the city was in the river\n" * 50)
    before = corpus.read_bytes()
    line = error_line(bertprep("build-vocab", corpus, "-o", out, "--vocab-size", 200, "-q"), status=1)
    assert f"would write {corpus}, which is INPUTS {corpus}" in line
    assert corpus.read_bytes() == before and os.listdir(out) == ["tokenizer_config.json"]


@pytest.mark.slow  # ~5 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_train_refuses_an_output_dir_inside_the_model_it_starts_from(run, tmp_path):
    from shard_factory import write_shard_dir

    shards = tmp_path / "shards"
    write_shard_dir(shards, vocab_size=len(VOCAB.read_text().splitlines()))
    before = snapshot(run)
    line = error_line(
        bertprep(
            "train", "--shards", shards, "--init-from", run, "-o", run / "phase2", "--max-steps", 1, "--warmup-steps", 0
        )
    )
    assert "Invalid value for --output-dir" in line and f"lies inside --model {run}" in line
    assert snapshot(run) == before


@pytest.mark.parametrize("content", [b'{"format_version": 1, "shards": [', b"\xff\xfe\x00binary", b"[]"])
@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_corrupt_manifest_is_named(tiny_shards, tmp_path, content):
    """Before: a truncated or binary manifest.json gave a JSONDecodeError / UnicodeDecodeError traceback."""
    broken = tmp_path / "shards"
    shutil.copytree(tiny_shards / "train", broken)
    (broken / "manifest.json").write_bytes(content)
    for args in (["inspect", broken], ["train", "--shards", broken, "-o", tmp_path / "run", "--max-steps", 1,
                                       "--warmup-steps", 0]):  # fmt: skip
        line = error_line(bertprep(*args), status=1)
        assert str(broken / "manifest.json") in line and "make the shards again" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # a real fine-tuning / training / inference run (10-35 s on 2 shared cores)
def test_a_binary_or_empty_predict_input_is_named(squad_v2_model, tmp_path):
    """Before: a binary --input gave a bare UnicodeDecodeError message (no file), an empty one a JSON error."""
    for name, content in (("bin.json", b"\xff\xd5\x00\x01" * 64), ("empty.json", b"")):
        data = tmp_path / name
        data.write_bytes(content)
        proc = bertprep("predict", "--model", squad_v2_model, "--input", data, "--output", tmp_path / "p.json",
                        "--no-progress")  # fmt: skip
        line = error_line(proc, status=1)
        assert line.startswith(f"Error: {data}")
    assert not (tmp_path / "p.json").exists()


@pytest.fixture(scope="module")
def truncated_hf(run, tmp_path_factory) -> Path:
    """An exported Hugging Face directory whose model.safetensors was cut short (an interrupted download)."""
    hf = tmp_path_factory.mktemp("hf") / "hf"
    assert bertprep("export", run, "-o", hf).returncode == 0
    with open(hf / "model.safetensors", "r+b") as f:
        f.truncate(5000)
    return hf


@pytest.mark.slow  # a real fine-tuning / training / inference run (10-35 s on 2 shared cores)
def test_a_truncated_safetensors_is_named_by_every_command_that_reads_it(truncated_hf, tiny_shards, tmp_path):
    """Before: a SafetensorError traceback in train --init-from, finetune, fill-mask and extract-features."""
    (tmp_path / "s.txt").write_text("the [MASK] city\n")
    (tmp_path / "t.tsv").write_text("sentence\tlabel\nthe city is good\t1\nthe river was bad\t0\n")
    weights = truncated_hf / "model.safetensors"
    runs = [
        ["fill-mask", "--model", truncated_hf, "the [MASK] city"],
        ["extract-features", "--model", truncated_hf, "--input", tmp_path / "s.txt", "--output", tmp_path / "f.arrow"],
        ["finetune", "--task", "glue", "--glue-task", "sst2", "--init-from", truncated_hf, "--train-file",
         tmp_path / "t.tsv", "-o", tmp_path / "ft", "--no-progress"],
        ["train", "--shards", tiny_shards / "train", "--init-from", truncated_hf, "-o", tmp_path / "tr",
         "--max-steps", 1, "--warmup-steps", 0, "--no-progress"],
    ]  # fmt: skip
    for args in runs:
        line = error_line(bertprep(*args), status=1)
        assert f"{weights} is damaged or incomplete" in line and "download it again" in line, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.txt", "t.tsv"]  # nothing written


@pytest.mark.slow  # ~7 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_vocab_url_is_refused_with_the_fix(run, tmp_path):
    """Before: make-shards --vocab https://... ended in Beam's "Unable to get filesystem" traceback; finetune and
    export said the file "does not exist"."""
    url = "https://example.com/bert/vocab.txt"
    corpus = tmp_path / "c.txt"
    corpus.write_text("the city was in the river.\n\nthe a is was.\n")
    runs = [
        ["make-shards", "-i", corpus, "--vocab", url, "-o", tmp_path / "shards"],
        ["finetune", "--task", "glue", "--glue-task", "sst2", "--init-from", run, "--vocab", url, "--train-file",
         corpus, "-o", tmp_path / "ft"],
        ["export", run, "--vocab", url, "-o", tmp_path / "hf"],
    ]  # fmt: skip
    for args in runs:
        line = error_line(bertprep(*args, timeout=60))
        assert "--vocab" in line and f"{url}: URLs are not supported; download it first" in line, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


def test_a_checkpoints_path_that_is_a_file_is_refused_before_training(tiny_shards, tmp_path):
    """Before: the run trained, then failed at its first save advising "Free space on that disk"."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoints").write_text("my notes")
    proc = bertprep(
        "train", "--shards", tiny_shards / "train", "--preset", "tiny", "-o", out, "--max-steps", 1, "--warmup-steps", 0
    )
    line = error_line(proc)
    assert f"{out / 'checkpoints'} is a file, not a directory" in line and "Free space" not in line
    assert (out / "checkpoints").read_text() == "my notes"


@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_remote_paths_that_cannot_work_fail_fast(tmp_path):
    """Before: a gs:// path ended in Beam's "Unable to get filesystem" traceback (without apache-beam[gcp]) or,
    with it and no network, after about 112 s of client retries. core.storage's probe answers in seconds; here (no
    gcp extra) the first check speaks. The no-network branch is tests/pipeline/test_remote.py."""
    (tmp_path / "c.txt").write_text("the city was in the river.\n")
    runs = [
        (["make-shards", "-i", "gs://bucket/corpus/*.txt", "--vocab", VOCAB, "-o", tmp_path / "s"], "input gs://"),
        (["make-shards", "-i", tmp_path / "c.txt", "--vocab", "gs://bucket/vocab.txt", "-o", tmp_path / "s"],
         "vocab gs://"),
        (["build-vocab", "gs://bucket/corpus.txt", "-o", tmp_path / "v"], "input gs://"),
    ]  # fmt: skip
    for args, named in runs:
        start = time.monotonic()
        proc = bertprep(*args, timeout=60)
        assert time.monotonic() - start < 30
        assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr, proc.stderr
        line = [x for x in proc.stderr.splitlines() if x.startswith("Error:")][-1]
        assert named in line and ("apache-beam[gcp]" in line or "credentials" in line or "cannot reach" in line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


@pytest.mark.slow  # a real fine-tuning / training / inference run (10-35 s on 2 shared cores)
def test_extract_features_default_layers_fit_a_two_layer_model(run, tmp_path):
    """Before: the default --layers -1,-2,-3,-4 failed on a 2-layer model ("layer -4 does not exist"). The
    default is now the last min(4, L) layers; an explicit layer the model lacks is still refused."""
    import pyarrow as pa

    sentences = tmp_path / "s.txt"
    sentences.write_text("the city was in the river\n")
    out = tmp_path / "f.arrow"
    # (the default --max-seq-length 128 failed too on this 64-position model: now min(128, max_position_embeddings))
    proc = bertprep("extract-features", "--model", run, "--input", sentences, "--output", out, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    with pa.ipc.open_file(out) as reader:
        assert [n for n in reader.schema.names if n.startswith("layer_")] == ["layer_-1", "layer_-2"]
    line = error_line(bertprep("extract-features", "--model", run, "--input", sentences, "--output",
                               tmp_path / "g.arrow", "--layers", "-1,-4", "--max-seq-length", 32, "--no-progress"),
                      status=1)  # fmt: skip
    assert "layer -4 does not exist: the model has 2 layers" in line
    assert not (tmp_path / "g.arrow").exists()
