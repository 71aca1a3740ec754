"""make-shards' held-out split (``--eval-fraction``) and exact deduplication (``--dedup exact``):
pipeline/beam/heldout.py and its use in graph.py, transforms.py, write_shards.py and run.py.

What users rely on: no document (by content) is in both the training and the eval shard set, on either
pairing scope and any worker count; the eval share is the fraction asked for; ``eval/`` is a complete shard
directory that ``inspect`` and ``train --eval-shards`` accept; duplicates are dropped (the first copy kept)
and nothing else; bad options fail with a message naming the option; the default output is unchanged.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # (not collected by pytest)
from apache_beam.testing.util import assert_that, equal_to
from click.testing import CliRunner

from beam_workers_factory import for_the_cli, two_workers
from bertprep.cli.main import cli
from bertprep.core import schema
from bertprep.core.normalization import bert_normalizer
from bertprep.pipeline import readers
from bertprep.pipeline.beam import heldout
from bertprep.pipeline.beam.run import MakeShardsError, run_make_shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.instances.bucket_files import ReadDocument
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.shards.inspection import iter_rows, verify_shards
from bertprep.pipeline.shards.write import MergeCountsFn
from conftest import FIXTURES, need_module
from model_factory import tiny_train_config

ONE_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
NUM_DOCS = 300


def _marker(k: int) -> str:
    return f"w{k:04d}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Synthetic documents in the BERT format over two files: document k's every token is its own marker
    word ``wKKKK`` (one vocab entry), so each token of a row says which document it came from."""
    root = tmp_path_factory.mktemp("heldout")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + [_marker(k) for k in range(NUM_DOCS + 50)] + ["."]) + "\n")
    files = [root / "a.txt", root / "b.txt"]
    docs = []  # (file index, ordinal, marker index)
    for f, path in enumerate(files):
        blocks = []
        for ordinal in range(NUM_DOCS // 2):
            k = f * (NUM_DOCS // 2) + ordinal
            sentences = [" ".join([_marker(k)] * (3 + (k + s) % 5)) + " ." for s in range(2 + k % 4)]
            blocks.append("\n".join(sentences))
            docs.append((f, ordinal, k))
        path.write_text("\n\n".join(blocks) + "\n")
    token_to_doc = {i: int(t[1:]) for i, t in enumerate(vocab.read_text().split("\n")) if t.startswith("w")}
    return {"vocab": str(vocab), "files": tuple(str(p) for p in files), "docs": docs, "token_to_doc": token_to_doc}


def _config(corpus, out: Path, **kw) -> ShardsConfig:
    base = dict(
        inputs=corpus["files"],
        vocab=corpus["vocab"],
        output_dir=str(out),
        input_format="bert",
        instance=InstanceConfig(max_seq_length=32, dupe_factor=1, mlm=MaskingConfig(max_predictions_per_seq=5)),
        masking="dynamic",
        bucket_size=40,
        num_shards=2,
        eval_fraction=0.2,
    )
    base.update(kw)
    return ShardsConfig(**base)


class _Warnings(logging.Handler):
    """The records of level WARNING and above that reach it."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def default_run(corpus, tmp_path_factory) -> tuple[Path, dict, list[str]]:
    """One run of :func:`_config`'s settings (global pairing scope, ``eval_fraction`` 0.2), shared by the tests
    that read it: its output folder (read only: a test that changes it copies it first), the manifest it
    returned, and the messages of the warnings logged under ``bertprep`` while it ran."""
    out = tmp_path_factory.mktemp("default-run") / "shards"
    logger, warnings = logging.getLogger("bertprep"), _Warnings()
    level = logger.level
    logger.setLevel(logging.WARNING)  # (as caplog.at_level(WARNING, logger="bertprep") does)
    logger.addHandler(warnings)
    try:
        manifest = run_make_shards(_config(corpus, out), ONE_WORKER)
    finally:
        logger.removeHandler(warnings)
        logger.setLevel(level)
    return out, manifest, [r.getMessage() for r in warnings.records]


def _documents_in(shard_dir: Path, token_to_doc: dict[int, int]) -> set[int]:
    """The documents whose tokens occur in the rows of a shard directory (dynamic masking: unmasked ids)."""
    found = set()
    for row in iter_rows(str(shard_dir)):
        found.update(token_to_doc[i] for i in row["input_ids"] if i in token_to_doc)
    return found


def _shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("shard-*.arrow"))}


# ------------------------------------------------------------------------------------------ the split rule


def test_eval_share_is_the_fraction_and_eval_sets_are_nested():
    ids = [(f"corpus/part-{f:03d}.txt", o) for f in range(20) for o in range(5000)]  # 100,000 documents
    for fraction in (0.01, 0.1, 0.5):
        held = sum(heldout.is_eval_document(0, p, o, fraction) for p, o in ids)
        sd = math.sqrt(fraction * (1 - fraction) / len(ids))
        assert abs(held / len(ids) - fraction) < 4 * sd, fraction
    small = {d for d in ids[:20000] if heldout.is_eval_document(0, *d, 0.05)}
    large = {d for d in ids[:20000] if heldout.is_eval_document(0, *d, 0.10)}
    assert small < large  # raising the fraction only adds documents to the eval side
    other_seed = {d for d in ids[:20000] if heldout.is_eval_document(1, *d, 0.05)}
    assert other_seed != small and abs(len(other_seed) - len(small)) < 100
    assert not any(heldout.is_eval_document(0, p, o, 0.0) for p, o in ids[:1000])


@pytest.mark.slow  # ~5 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_split_rule_is_stable_across_processes_whatever_pythonhashseed():
    code = (
        "from bertprep.pipeline.beam.heldout import eval_score; "
        "print(repr([eval_score(7, 'gs://b/wiki_%02d' % f, o) for f in range(3) for o in range(50)]))"
    )
    here = repr([heldout.eval_score(7, f"gs://b/wiki_{f:02d}", o) for f in range(3) for o in range(50)])
    other_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    env = dict(os.environ, PYTHONHASHSEED=other_seed)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == here


def test_normalized_text_equates_what_the_tokenizer_equates():
    uncased = bert_normalizer(True).normalize_str
    cased = bert_normalizer(False, False).normalize_str
    a = ["The  Café is open.", "Twice\tover ."]
    b = ["the cafe is   open.", "", "twice over ."]  # case, accents, whitespace, an empty line
    assert (
        heldout.normalized_text(a, uncased) == heldout.normalized_text(b, uncased) == "the cafe is open.\ntwice over ."
    )
    assert heldout.normalized_text(a, cased) != heldout.normalized_text(b, cased)
    assert heldout.normalized_text(["the cafe is open!"], uncased) != heldout.normalized_text(b[:1], uncased)
    assert heldout.normalized_text(["  ", "\x00"], uncased) == ""


# ------------------------------------------------------------------------------------- the Beam composite


def _assert_dedup_counts(counts, duplicate_groups: int, documents_dropped: int) -> None:
    """The exact-dedup counters of a run, merged: ``duplicate_groups`` texts seen more than once,
    ``documents_dropped`` copies dropped (each counted as a reader's skipped ``duplicate`` document)."""
    merged = counts | beam.CombineGlobally(MergeCountsFn())
    expected = {
        "dedup": {"duplicate_groups": duplicate_groups, "documents_dropped": documents_dropped},
        "reader": {"skipped_documents": {"duplicate": documents_dropped}},
    }
    assert_that(merged, equal_to([expected]), label="counts")


def test_exact_dedup_drops_every_copy_but_the_first_in_input_order(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("One doc.\nIts second line.\n\nUnique two.\n\nONE   doc.\nits second line.\n\nunique three.\n")
    b.write_text("one doc.\nits second line.\n\nUnique two.\n\nUnique four.\n")
    config = ShardsConfig(
        inputs=(str(a), str(b)), vocab="unused", output_dir=str(tmp_path / "o"), input_format="bert", dedup="exact"
    )
    with BeamTestPipeline() as p:
        result = (p | beam.Create([(0, str(a)), (1, str(b))])) | heldout.ExactDedup(config)
        assert_that(result["files"], equal_to([(0, str(a), (2,)), (1, str(b), (0, 1))]), label="skips")
        _assert_dedup_counts(result["counts"], duplicate_groups=2, documents_dropped=3)


def test_drop_duplicate_documents_keeps_the_first_copy_of_each_text():
    config = ShardsConfig(inputs=("unused",), vocab="unused", output_dir="unused", dedup="exact")
    docs = [
        ReadDocument(1, 0, ["One doc.", "Its second line."]),
        ReadDocument(0, 4, ["one   DOC.", "its second line."]),
        ReadDocument(0, 7, ["one doc.", "its second line."]),
        ReadDocument(0, 1, ["Unique."]),
        ReadDocument(2, 0, ["\x00", " "]),
        ReadDocument(2, 1, ["\x00"]),
        ReadDocument(1, 1, ["Unique!"]),
    ]
    with BeamTestPipeline() as p:
        result = (p | beam.Create(docs)) | heldout.DropDuplicateDocuments(config)
        kept = result["documents"] | beam.Map(lambda d: (d.file_index, d.ordinal))
        # (0, 4) is the first copy of "one doc. / its second line."; documents that normalise to nothing
        # are never copies of each other (they are dropped later as empty)
        assert_that(kept, equal_to([(0, 4), (0, 1), (2, 0), (2, 1), (1, 1)]), label="kept")
        _assert_dedup_counts(result["counts"], duplicate_groups=1, documents_dropped=2)


# ----------------------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("scope", ["global", pytest.param("file", marks=pytest.mark.slow)])  # file: make test
def test_no_document_is_in_both_sets_and_the_eval_share_is_the_fraction(corpus, request, tmp_path, scope):
    if scope == "global":  # the module's default run (its settings: _config's, the global scope)
        out, manifest, _ = request.getfixturevalue("default_run")
    else:
        out = tmp_path / "shards"
        manifest = run_make_shards(_config(corpus, out, pairing_scope=scope), ONE_WORKER)
    train = _documents_in(out, corpus["token_to_doc"])
    held = _documents_in(out / heldout.EVAL_DIR, corpus["token_to_doc"])
    assert train and held and not train & held  # by content: no token of an eval document in training rows
    assert train | held == {k for _, _, k in corpus["docs"]}  # every document is used on its side
    keys = readers.input_keys(corpus["files"], corpus["files"])  # the files' paths as the split hashes them
    assert keys == ["a.txt", "b.txt"]
    expected = {k for f, o, k in corpus["docs"] if heldout.is_eval_document(0, keys[f], o, 0.2)}
    assert held == expected
    sd = math.sqrt(0.2 * 0.8 / NUM_DOCS)
    assert abs(len(held) / NUM_DOCS - 0.2) < 4 * sd
    eval_manifest = json.loads((out / heldout.EVAL_DIR / schema.MANIFEST_NAME).read_text())
    for m, role in ((manifest, "train"), (eval_manifest, "eval")):
        assert m["split"]["role"] == role and m["split"]["eval_fraction"] == 0.2
        assert (m["split"]["train_documents"], m["split"]["eval_documents"]) == (len(train), len(held))
        assert m["config"]["eval_fraction"] == 0.2 and m["config"]["pairing_scope"] == scope
    same_options = {k: v for k, v in manifest["config"].items() if k != "num_shards"}  # eval: chosen from its size
    assert {k: v for k, v in eval_manifest["config"].items() if k != "num_shards"} == same_options
    assert manifest["statistics"]["documents"]["used"] == len(train)
    assert manifest["statistics"]["documents"]["skipped"] == {"held_out_for_eval": len(held)}
    assert eval_manifest["statistics"]["documents"]["skipped"] == {"in_training_split": len(train)}
    report = verify_shards(str(out / heldout.EVAL_DIR))  # a complete shard directory of its own
    assert report["rows"] == eval_manifest["statistics"]["instances"] > 0


@pytest.mark.slow
def test_split_and_dedup_are_byte_identical_with_one_and_two_workers(corpus, tmp_path):
    for scope in ("global", "file"):
        one, two = tmp_path / f"one-{scope}", tmp_path / f"two-{scope}"
        m1 = run_make_shards(_config(corpus, one, pairing_scope=scope, dedup="exact", masking="static"), ONE_WORKER)
        config = _config(corpus, two, pairing_scope=scope, dedup="exact", masking="static")
        m2 = run_make_shards(config, TWO_WORKERS, workers=two_workers())
        assert _shard_bytes(one) and _shard_bytes(one) == _shard_bytes(two)
        assert _shard_bytes(one / "eval") and _shard_bytes(one / "eval") == _shard_bytes(two / "eval")
        assert m1["split"] == m2["split"] and m1["dedup"] == m2["dedup"]


@pytest.mark.parametrize("scope", ["global", "file"])
def test_dedup_removes_the_planted_copies_and_nothing_else(corpus, tmp_path, scope):
    src = Path(corpus["files"][0]).read_text().split("\n\n")
    planted = [src[3], src[3], src[10].upper(), src[20].replace(" ", "   ")]  # 4 copies of 3 documents
    near = [src[30].replace(_marker(30), _marker(NUM_DOCS + 1), 1)]  # one word differs: kept
    extra = Path(tmp_path / "c.txt")
    extra.write_text("\n\n".join(planted + near) + "\n")
    out = tmp_path / "shards"
    config = _config(
        corpus, out, inputs=corpus["files"] + (str(extra),), eval_fraction=0.0, dedup="exact", pairing_scope=scope
    )
    manifest = run_make_shards(config, ONE_WORKER)
    assert manifest["dedup"]["documents_dropped"] == 4 and manifest["dedup"]["duplicate_groups"] == 3
    assert manifest["statistics"]["documents"]["read"] == NUM_DOCS + 5
    assert manifest["statistics"]["documents"]["skipped"] == {"duplicate": 4}
    assert manifest["statistics"]["documents"]["used"] == NUM_DOCS + 1  # the near-duplicate stays
    used = _documents_in(out, corpus["token_to_doc"])
    assert used == set(range(NUM_DOCS)) | {NUM_DOCS + 1}
    assert "split" not in manifest and "eval_fraction" not in manifest["config"]
    assert not (out / heldout.EVAL_DIR).exists()


def test_default_run_writes_neither_split_nor_dedup(corpus, tmp_path):
    config = _config(corpus, tmp_path / "shards", eval_fraction=0.0)
    assert not {"eval_fraction", "eval_seed", "dedup"} & set(config.to_dict())
    manifest = run_make_shards(config, ONE_WORKER)
    assert "split" not in manifest and "dedup" not in manifest
    assert not (tmp_path / "shards" / heldout.EVAL_DIR).exists()


@pytest.mark.slow  # ~3 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_rerun_without_split_removes_the_old_eval_set_and_refuses_without_overwrite(corpus, default_run, tmp_path):
    out = tmp_path / "shards"
    shutil.copytree(default_run[0], out)  # the output of a run with a held-out split
    assert (out / "eval" / schema.MANIFEST_NAME).exists()
    for name in os.listdir(out):  # only eval/ still holds shards: still refused
        if name != "eval":
            os.remove(out / name)
    with pytest.raises(MakeShardsError, match="--overwrite"):
        run_make_shards(_config(corpus, out, eval_fraction=0.0), ONE_WORKER)
    run_make_shards(_config(corpus, out, eval_fraction=0.0, overwrite=True), ONE_WORKER)
    assert (out / schema.MANIFEST_NAME).exists()
    assert not (out / "eval").exists()  # no eval set of another split beside the new training shards


def test_eval_fraction_that_holds_out_nothing_is_a_clear_error(corpus, tmp_path):
    with pytest.raises(MakeShardsError, match=r"--eval-fraction 1e-06 held out no document"):
        run_make_shards(_config(corpus, tmp_path / "shards", eval_fraction=1e-6), ONE_WORKER)
    assert not (tmp_path / "shards" / schema.MANIFEST_NAME).exists()


@pytest.mark.parametrize("value", ["1", "1.5", "-0.1"])
def test_bad_eval_fraction_is_refused_naming_the_option(corpus, tmp_path, value):
    result = CliRunner().invoke(
        cli,
        [
            "make-shards",
            "-i",
            corpus["files"][0],
            "--vocab",
            corpus["vocab"],
            "-o",
            str(tmp_path / "o"),
            "--eval-fraction",
            value,
        ],
    )
    assert result.exit_code == 2 and "--eval-fraction" in result.output and "0<=x<1" in result.output
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match=r"--eval-fraction must be in \[0, 1\)"):
        _config(corpus, tmp_path / "o", eval_fraction=float(value))


def test_cli_help_documents_split_and_dedup():
    result = CliRunner().invoke(cli, ["make-shards", "--help"], terminal_width=200)
    for option in ("--eval-fraction", "--eval-seed", "--dedup [none|exact|minhash]", "--dedup-threshold"):
        assert option in result.output
    assert "OUTPUT_DIR/eval/" in result.output and "minhash: near-duplicates too" in result.output


def test_cli_make_shards_prints_the_split_and_inspect_reads_the_eval_set(corpus, tmp_path):
    out = tmp_path / "o"
    result = CliRunner().invoke(
        cli,
        [
            "make-shards",
            "-i",
            ",".join(corpus["files"]),
            "--vocab",
            corpus["vocab"],
            "-o",
            str(out),
            "--input-format",
            "bert",
            "--max-seq-length",
            "32",
            "--max-predictions-per-seq",
            "5",
            "--dupe-factor",
            "1",
            "--eval-fraction",
            "0.1",
            "--dedup",
            "exact",
            "-q",
            *ONE_WORKER,
        ],
    )
    assert result.exit_code == 0, result.output
    assert "held-out split: eval_fraction 0.1" in result.output and "dedup: exact: 0 of 300" in result.output
    inspected = CliRunner().invoke(cli, ["inspect", str(out / "eval"), "--verify"])
    assert inspected.exit_code == 0, inspected.output
    assert "this is the eval set" in inspected.output


# ------------------------------------------------------------------------------------------- real data


def _ngrams(ids, n: int = 8) -> set[tuple[int, ...]]:
    return {tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)}


@pytest.mark.slow
def test_no_wikipedia_article_is_in_both_sets(shared_data, uncased_vocab, tmp_path):
    """Real articles (WikiExtractor output): every 8-gram of word pieces in a row of either set occurs in an
    article of that set, so no text of an eval article is in the training rows, and the other way round."""
    from bertprep.pipeline import readers
    from bertprep.pipeline.text.tokenization import SentenceEncoder, load_vocab

    folder = shared_data / "wikipedia" / "wikiextractor-featured" / "AA"
    files = (str(folder / "wiki_01"), str(folder / "wiki_02"))
    out = tmp_path / "shards"
    config = ShardsConfig(
        inputs=files,
        vocab=str(uncased_vocab),
        output_dir=str(out),
        input_format="wikiextractor",
        instance=InstanceConfig(dupe_factor=1),
        masking="dynamic",
        eval_fraction=0.25,
        eval_seed=3,
        dedup="exact",
    )
    manifest = run_make_shards(config, ONE_WORKER)
    encoder = SentenceEncoder(load_vocab(str(uncased_vocab)), True)
    grams = {"train": set(), "eval": set()}
    articles = {"train": 0, "eval": 0}
    for path, key in zip(files, readers.input_keys(files, files), strict=True):
        for doc in readers.read_documents(path, "wikiextractor"):
            side = "eval" if heldout.is_eval_document(3, key, doc.ordinal, 0.25) else "train"
            ids, _ = encoder.encode_flat(doc.sentences)
            grams[side] |= _ngrams(ids.tolist())
            articles[side] += 1
    assert (manifest["split"]["train_documents"], manifest["split"]["eval_documents"]) == (
        articles["train"],
        articles["eval"],
    )
    assert articles["eval"] >= 5 and len(grams["eval"] - grams["train"]) > 10_000  # the check below can fail
    vocab = load_vocab(str(uncased_vocab))
    special = {vocab.token_to_id["[CLS]"], vocab.token_to_id["[SEP]"]}
    for side, directory in (("train", out), ("eval", out / heldout.EVAL_DIR)):
        checked = 0
        for row in iter_rows(str(directory)):
            segment: list[int] = []
            for token in list(row["input_ids"]) + [next(iter(special))]:
                if token not in special:
                    segment.append(token)
                    continue
                found = _ngrams(segment)
                assert found <= grams[side], f"a {side} row holds text of no {side} article"
                checked += len(found)
                segment = []
        assert checked > 1000, side


@pytest.mark.slow
def test_train_evaluates_on_the_eval_directory(corpus, tmp_path):
    from bertprep.bert_model.pretrain.trainer import train

    out = tmp_path / "shards"
    run_make_shards(
        _config(
            corpus,
            out,
            masking="static",
            instance=InstanceConfig(max_seq_length=32, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=5)),
        ),
        ONE_WORKER,
    )
    eval_rows = sum(s["rows"] for s in json.loads((out / "eval" / schema.MANIFEST_NAME).read_text())["shards"])
    eval_shards = str(out / heldout.EVAL_DIR)
    settings = dict(max_steps=2, warmup_steps=1, log_every=1, eval_every=2)
    result = train(tiny_train_config(out, tmp_path / "run", eval_shards=eval_shards, **settings))
    assert result.step == 2
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [x for x in lines if x["split"] == "eval"]
    assert evals and evals[-1]["sequences"] == eval_rows and math.isfinite(evals[-1]["mlm_loss"])


@pytest.mark.parametrize("scope", ["global", pytest.param("file", marks=pytest.mark.slow)])  # file: make test
def test_dataflow_job_builds_with_split_and_dedup_and_shuffles_no_document_text(
    scope, monkeypatch, no_google_credentials
):
    """The job Dataflow would run (built and validated, never submitted): the dedup shuffle moves hashes and
    ids (its key coder is deterministic, as Dataflow requires), and the file scope still shuffles no
    document."""
    need_module("apache_beam.runners.dataflow.internal.apiclient")
    import socket

    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam import dataflow
    from bertprep.pipeline.text.tokenization import load_vocab

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    for target, name in ((socket, "getaddrinfo"), (socket, "create_connection"), (socket.socket, "connect")):
        monkeypatch.setattr(target, name, refuse)
    bucket = "gs://bertprep-test"
    config = ShardsConfig(
        inputs=(f"{bucket}/corpus/",),
        vocab=f"{bucket}/vocab.txt",
        output_dir=f"{bucket}/shards",
        input_format="bert",
        pairing_scope=scope,
        eval_fraction=0.01,
        dedup="exact",
    )
    fixtures = FIXTURES / "pipeline"
    result = dataflow.dry_run(
        config,
        PipelineOptions(
            [
                "--runner=DataflowRunner",
                "--project=bertprep-test",
                "--region=us-central1",
                f"--temp_location={bucket}/tmp",
                "--sdk_container_image=gcr.io/bertprep-test/bertprep-worker:latest",
            ]
        ),
        files=[f"{bucket}/corpus/a.txt", f"{bucket}/corpus/b.txt"],
        vocab=load_vocab(str(fixtures / "vocab.txt")),
    )
    names = set(result.transform_names())
    assert any(n.startswith("WriteEvalShards/") for n in names)
    assert ("ExactDedup/GroupByText" if scope == "file" else "DropDuplicateDocuments/GroupByText") in names
    if scope == "file":
        assert "ProcessFilesStreaming/ProcessFileStreamingFn" in names  # one streaming pass makes both sets
        allowed = (
            "ListInputFiles/",
            "WriteArrowShards/",
            "WriteEvalShards/",
            "ExactDedup/",  # names, hashes, plans
            "MergeTrainOnlyCounts/",
            "MergeEvalOnlyCounts/",
        )  # and counts
        assert all(g.startswith(allowed) for g in result.group_by_keys())
    else:
        assert "CreateEvalInstances/GroupByBucket" in names
    if result.staging_dir:
        shutil.rmtree(result.staging_dir, ignore_errors=True)


@pytest.mark.parametrize("beam_args", [ONE_WORKER, pytest.param(TWO_WORKERS, marks=pytest.mark.slow)])
def test_bad_input_met_by_the_dedup_pass_is_one_clear_line(corpus, tmp_path, beam_args, monkeypatch):
    if beam_args is TWO_WORKERS:
        for_the_cli(monkeypatch)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "A fine document. It has two sentences."}\nnot json at all\n')
    result = CliRunner().invoke(
        cli,
        [
            "make-shards",
            "-i",
            str(bad),
            "--vocab",
            corpus["vocab"],
            "-o",
            str(tmp_path / "o"),
            "--input-format",
            "jsonl",
            "--dedup",
            "exact",
            "-q",
            *beam_args,
        ],
    )
    assert result.exit_code == 1
    assert f"{bad}:2: not a JSON object" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------- train --eval-shards check


def _split(role: str, **kw) -> dict:
    return {
        "split": {
            "role": role,
            "eval_fraction": 0.01,
            "eval_seed": 0,
            "train_documents": 990,
            "eval_documents": 10,
            **kw,
        }
    }


def test_held_out_mismatch_names_what_makes_an_eval_set_unsafe():
    assert schema.held_out_mismatch(_split("train"), _split("eval")) is None  # one run's two sets
    assert schema.held_out_mismatch({}, {}) is None  # an eval set made apart: nothing to compare
    assert "another split (eval_seed 1 vs 0)" in schema.held_out_mismatch(_split("train"), _split("eval", eval_seed=1))
    assert "not a held-out set" in schema.held_out_mismatch(_split("train"), {})
    assert "not a held-out set" in schema.held_out_mismatch(_split("train"), _split("train"))
    assert "record no split" in schema.held_out_mismatch({}, _split("eval"))


@pytest.mark.slow
def test_train_warns_when_the_eval_shards_may_hold_training_documents(corpus, default_run, tmp_path, caplog):
    from bertprep.bert_model.pretrain.trainer import _warn_if_not_held_out

    one, other = default_run[0], tmp_path / "other"
    run_make_shards(_config(corpus, other, eval_seed=5), ONE_WORKER)
    with caplog.at_level("WARNING"):
        _warn_if_not_held_out(str(one), str(one / "eval"), True)
        assert not caplog.records  # the held-out set of these shards
        _warn_if_not_held_out(str(one), str(other / "eval"), True)
        _warn_if_not_held_out(str(one), str(one), True)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "held out by another split (eval_seed 5 vs 0" in messages[0] and "may share documents" in messages[0]
    assert "the training shards themselves" in messages[1]


@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_held_out_set_too_small_to_measure_is_warned_about_naming_its_size(corpus, default_run, tmp_path, caplog):
    """Before, --eval-fraction 0.01 on ~100 documents held out about one without a word."""
    with caplog.at_level(logging.WARNING, logger="bertprep"):
        manifest = run_make_shards(_config(corpus, tmp_path / "small", eval_fraction=0.03), ONE_WORKER)
    held = manifest["split"]["eval_documents"]
    assert 1 <= held < 10
    warnings = [r.getMessage() for r in caplog.records if "too few to measure" in r.getMessage()]
    assert warnings == [
        f"--eval-fraction 0.03 held out {held} of {NUM_DOCS} documents, too few to measure held-out loss and "
        "accuracy (fewer than 10); raise --eval-fraction, or make shards of a held-out file of your own for "
        "train --eval-shards"
    ]
    _, manifest, logged = default_run  # eval_fraction 0.2
    assert manifest["split"]["eval_documents"] >= 10
    assert not [message for message in logged if "too few to measure" in message]
