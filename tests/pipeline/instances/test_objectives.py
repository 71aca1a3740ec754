"""``--objective {nsp, sop, none}``: the rows each objective makes, checked independently of the code that
makes them, and the objective through make-shards, inspect --verify, train and export.

The unit tests give every token of the corpus its own id, so a row can be traced back to the documents and
positions it came from: SOP segments are consecutive parts of one document in the order the label says;
``none`` rows are the documents back to back with one [SEP] between two documents, every row full but the
last, every token used exactly once per pass.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.core import schema
from bertprep.pipeline.config import OBJECTIVES, InstanceConfig
from bertprep.pipeline.instances.bucket_arrays import BucketDocuments
from bertprep.pipeline.instances.bucket_instances import describe_instances
from bertprep.pipeline.instances.bucket_rows import assemble_batches
from bertprep.pipeline.instances.common import InstanceStats, VocabIds
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.masking.fast import mask_table
from bertprep.pipeline.text.tokenization import Vocab
from conftest import FIXTURES, need_module
from pipeline_factory import make_shards

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CLS, SEP, MASK = 2, 3, 4
FIXTURES = FIXTURES / "pipeline"
BEAM_IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


# ------------------------------------------------------------------------------ a corpus of unique tokens


def _unique_corpus(n_docs: int, seed: int, max_sentences: int = 9, max_len: int = 25):
    """Documents (lists of sentences of ids) where every token id occurs once; and id -> (doc, position)."""
    rng = random.Random(seed)
    docs, where, next_id = [], {}, len(SPECIALS)
    for d in range(n_docs):
        n_sentences = 1 if rng.random() < 0.15 else rng.randint(2, max_sentences)
        doc, pos = [], 0
        for _ in range(n_sentences):
            sentence = []
            for _ in range(rng.randint(1, max_len)):
                sentence.append(next_id)
                where[next_id] = (d, pos)
                next_id, pos = next_id + 1, pos + 1
            doc.append(sentence)
        docs.append(doc)
    return docs, where, next_id


def _make(docs, vocab_size, config: InstanceConfig, *, mask: bool, seed: int = 1):
    vocab = Vocab.from_tokens(SPECIALS + [f"t{i}" for i in range(len(SPECIALS), vocab_size)], source="unique")
    ids = VocabIds(vocab)
    stats = InstanceStats()
    bucket = BucketDocuments.from_lists(docs)
    described = describe_instances(bucket, config, ids, random.Random(seed), stats, mask=mask)
    table = pa.Table.from_batches(
        list(assemble_batches(bucket, described, ids, vocab.size, chunk_rows=101)),
        schema=schema.shard_schema(vocab.size, config.objective),
    )
    return table, stats, ids


def _split_at_sep(row_ids: list[int]) -> list[list[int]]:
    """The pieces between [CLS] ... [SEP] separated by the inner [SEP]s."""
    pieces, current = [], []
    for t in row_ids[1:-1]:
        if t == SEP:
            pieces.append(current)
            current = []
        else:
            current.append(t)
    pieces.append(current)
    return pieces


# ------------------------------------------------------------------------------------------------------ sop


def test_sop_segments_are_consecutive_parts_of_one_document_in_label_order():
    docs, where, vocab_size = _unique_corpus(300, seed=3)
    config = InstanceConfig(
        objective="sop", max_seq_length=48, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=7)
    )
    table, stats, _ = _make(docs, vocab_size, config, mask=False)
    assert table.schema.names == list(schema.COLUMNS)
    rows = table.to_pylist()
    assert len(rows) > 500
    swapped = 0
    for row in rows:
        ids, tt = row["input_ids"], row["token_type_ids"]
        assert ids[0] == CLS and ids[-1] == SEP and ids.count(SEP) == 2 and len(ids) <= 48
        first, second = _split_at_sep(ids)
        assert first and second
        assert tt == [0] * (len(first) + 2) + [1] * (len(second) + 1)
        doc_first = {where[t][0] for t in first}
        doc_second = {where[t][0] for t in second}
        assert doc_first == doc_second and len(doc_first) == 1, "SOP segments from different documents"
        for segment in (first, second):  # each segment a contiguous run of its document (truncation trims ends)
            positions = [where[t][1] for t in segment]
            assert positions == list(range(positions[0], positions[0] + len(segment)))
        in_order = where[first[-1]][1] < where[second[0]][1]
        assert row["next_sentence_label"] == (0 if in_order else 1)
        swapped += row["next_sentence_label"]
    assert stats.not_next == swapped and stats.instances == len(rows)
    assert stats.same_document_not_next == 0
    # one-sentence documents are never paired with anything (ALBERT's code pairs them with a random document)
    one_sentence = {d for d, doc in enumerate(docs) if len(doc) == 1}
    assert one_sentence
    used = {where[t][0] for row in rows for t in row["input_ids"] if t > MASK}
    assert not used & one_sentence
    assert stats.one_segment_chunks_skipped >= 2 * len(one_sentence)


def test_sop_one_sentence_chunks_are_merged_or_skipped_and_counted():
    # every sentence (70 pieces) reaches the target (61) alone: it takes the next sentence; a document's odd
    # last sentence is skipped
    docs = [[[5 + 1000 * d + 100 * s + k for k in range(70)] for s in range(3)] for d in range(40)]
    docs += [[[60000 + k for k in range(12)]]]  # a one-sentence document
    config = InstanceConfig(
        objective="sop",
        max_seq_length=64,
        dupe_factor=1,
        short_seq_prob=0.0,
        mlm=MaskingConfig(max_predictions_per_seq=10),
    )
    table, stats, _ = _make(docs, 60012, config, mask=True)
    assert table.num_rows == 40  # (sentence 0 + sentence 1) of each three-sentence document
    assert stats.one_segment_chunks_merged == 40
    assert stats.one_segment_chunks_skipped == 41 and stats.one_segment_tokens_skipped == 40 * 70 + 12
    assert stats.truncated == 40 and all(len(ids) == 64 for ids in table.column("input_ids").to_pylist())


@pytest.mark.parametrize("mask", [True, False])
def test_sop_labels_are_half_swapped(mask):
    docs, _, vocab_size = _unique_corpus(4000, seed=11, max_len=12)
    config = InstanceConfig(
        objective="sop", max_seq_length=32, dupe_factor=5, mlm=MaskingConfig(max_predictions_per_seq=5)
    )
    table, stats, _ = _make(docs, vocab_size, config, mask=mask)
    labels = np.asarray(table.column("next_sentence_label").to_pylist())
    assert len(labels) > 20_000  # binomial sd of the share < 0.35%
    assert abs(labels.mean() - 0.5) <= 0.01
    assert stats.not_next == int(labels.sum())


# ----------------------------------------------------------------------------------------------------- none


@pytest.mark.parametrize("max_seq_length", [16, 64])
def test_none_rows_are_the_documents_back_to_back_filled_to_max_seq_length(max_seq_length):
    docs, where, vocab_size = _unique_corpus(200, seed=5)
    docs.insert(7, [])  # an empty document adds no separator
    where = {t: (d + (d >= 7), p) for t, (d, p) in where.items()}
    dupe_factor = 3
    config = InstanceConfig(
        objective="none",
        max_seq_length=max_seq_length,
        dupe_factor=dupe_factor,
        mlm=MaskingConfig(max_predictions_per_seq=4),
    )
    table, stats, _ = _make(docs, vocab_size, config, mask=False)
    assert table.schema.names == [c for c in schema.COLUMNS if c != "next_sentence_label"]
    rows = table.to_pylist()
    lengths = [len(r["input_ids"]) for r in rows]
    assert sum(n < max_seq_length for n in lengths) == dupe_factor  # one short row per pass: its last
    assert max(lengths) == max_seq_length
    doc_lengths = {d: sum(map(len, doc)) for d, doc in enumerate(docs)}
    seen: dict[int, int] = {}
    separators = 0
    for row in rows:
        ids = row["input_ids"]
        assert ids[0] == CLS and ids[-1] == SEP and set(row["token_type_ids"]) == {0}
        pieces = _split_at_sep(ids)
        separators += len(pieces) - 1
        for k, piece in enumerate(pieces):
            for t in piece:
                seen[t] = seen.get(t, 0) + 1
            if not piece:
                continue
            d = where[piece[0]][0]
            positions = [where[t][1] for t in piece]
            assert {where[t][0] for t in piece} == {d}, "a run without a [SEP] spans two documents"
            assert positions == list(range(positions[0], positions[0] + len(piece)))
            if k < len(pieces) - 1:  # a [SEP] follows: the document ends here
                assert positions[-1] == doc_lengths[d] - 1
            if k > 0:  # a [SEP] precedes: the document starts here
                assert positions[0] == 0
    n_used = sum(1 for doc in docs if doc)
    assert separators == (n_used - 1) * dupe_factor == stats.document_separators
    assert len(seen) == len(where) and set(seen.values()) == {dupe_factor}  # no token lost or repeated
    assert stats.truncated == 0 and stats.not_next == 0


@pytest.mark.parametrize("sampling", ["exact", "fast"])
def test_none_masking_never_picks_a_separator(sampling):
    docs, _, vocab_size = _unique_corpus(300, seed=8, max_sentences=3, max_len=4)  # short documents: many [SEP]
    config = InstanceConfig(
        objective="none", max_seq_length=32, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=5)
    )
    table, stats, ids = _make(docs, vocab_size, config, mask=sampling == "exact")
    if sampling == "fast":
        unmasked = table
        table, counts = mask_table(
            table, config.mlm, MASK, np.asarray(ids.random_ids), np.random.default_rng(0), sep_id=SEP
        )
        assert table.column("input_ids").to_pylist() != unmasked.column("input_ids").to_pylist()
        stats.masked = counts["masked"]
    total = 0
    for row in table.to_pylist():
        ids_row, positions, labels = row["input_ids"], row["masked_lm_positions"], row["masked_lm_ids"]
        original = list(ids_row)
        for p, label in zip(positions, labels, strict=True):
            original[p] = label
        candidates = sum(1 for t in original if t not in (CLS, SEP))
        wanted = min(5, max(1, round(len(original) * 0.15)))
        assert len(positions) == min(wanted, candidates)
        assert positions == sorted(set(positions))
        assert all(original[p] not in (CLS, SEP) for p in positions)
        assert original.count(SEP) >= 1 and ids_row.count(SEP) == original.count(SEP)
        total += len(positions)
    assert total == stats.masked > 0


def test_objective_is_checked():
    with pytest.raises(ValueError, match="objective must be one of nsp, sop, none"):
        InstanceConfig(objective="rtd")
    assert OBJECTIVES == ("nsp", "sop", "none") and InstanceConfig().objective == "nsp"


# ------------------------------------------------------------------------------------ make-shards and inspect


def _run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _make_shards(out: Path, objective: str, *extra: str):
    return make_shards(out, "--objective", objective, *extra)


@pytest.fixture(scope="module")
def shard_sets(tmp_path_factory):
    """make-shards output per (objective, sampling); ``none-dynamic`` is unmasked (``--masking dynamic``)."""
    root = tmp_path_factory.mktemp("objectives")
    made = {}
    for name, objective, extra in (
        ("sop-exact", "sop", ()),
        ("sop-fast", "sop", ("--sampling", "fast")),
        ("none-exact", "none", ()),
        ("none-fast", "none", ("--sampling", "fast")),
        ("none-dynamic", "none", ("--masking", "dynamic")),
    ):
        result = _make_shards(root / name, objective, *extra)
        assert result.exit_code == 0, result.output
        made[name] = root / name
    return made


@pytest.mark.parametrize("name", ["sop-exact", "sop-fast", "none-exact", "none-fast", "none-dynamic"])
@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_make_shards_records_the_objective_and_inspect_verifies_it(shard_sets, name):
    out = shard_sets[name]
    objective = name.split("-")[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["objective"] == objective
    assert manifest["schema"]["columns"] == list(schema.columns(objective))
    stats = manifest["statistics"]
    assert "not_next_share" not in stats
    if objective == "sop":
        assert "swapped (B precedes A" in manifest["schema"]["next_sentence_label"]
        assert 0.4 < stats["swapped_share"] < 0.6
        assert set(stats["one_segment_chunks"]) == {"merged", "skipped", "tokens_skipped"}
    else:
        assert "next_sentence_label" not in manifest["schema"]
        assert stats["document_separators"] > 0 and stats["truncated_share"] == 0
    verified = _run(["inspect", str(out), "-n", "2", "--verify"])
    assert verified.exit_code == 0, verified.output
    assert f"(objective {objective})" in verified.output
    examples = [line for line in verified.output.splitlines() if line.startswith("#")]
    assert len(examples) == 2
    for line in examples:
        if objective == "sop":
            assert "(InOrder," in line or "(Swapped," in line
        else:
            assert "Next" not in line and line.rstrip().endswith("tokens)")
    assert ("SOP  swapped" in verified.output) == (objective == "sop")


def test_verify_catches_rows_that_break_the_objective(shard_sets, tmp_path):
    import shutil

    for name, key, value, expected in (
        ("sop-exact", "swapped_share", 0.25, "swapped_share is 0.25"),
        ("none-exact", "document_separators", 1, "the manifest says 1"),
    ):
        out = tmp_path / name
        shutil.copytree(shard_sets[name], out)
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["statistics"][key] = value
        (out / "manifest.json").write_text(json.dumps(manifest))
        result = _run(["inspect", str(out), "-n", "0", "--no-stats", "--verify"])
        assert result.exit_code == 1 and expected in result.output, result.output
    # a none directory whose rows are not full: claims twice as long rows
    out = tmp_path / "none-long"
    shutil.copytree(shard_sets["none-exact"], out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["config"]["max_seq_length"] = 128
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = _run(["inspect", str(out), "-n", "0", "--no-stats", "--verify"])
    assert result.exit_code == 1 and "rows shorter than max_seq_length 128" in result.output


def test_help_explains_the_objectives():
    result = _run(["make-shards", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--objective [nsp|sop|none]" in text and "default: nsp" in text
    for words in ("BERT sec. 3.1", "ALBERT sec. 4.2", "RoBERTa sec. 4.2", "1 = swapped"):
        assert words in text
    unused = _make_shards(Path("/nonexistent/out"), "none", "--short-seq-prob", "0.3", "-i", "/nonexistent/in.txt")
    assert "--short-seq-prob is not used with --objective none" in unused.output
    bad = CliRunner().invoke(cli, ["make-shards", "--vocab", "v.txt", "-o", "o", "--objective", "rtd"])
    assert bad.exit_code == 2 and "'rtd' is not one of 'nsp', 'sop', 'none'" in bad.output


# ------------------------------------------------------------------------------------------ train and export


def _train(shards: Path, out: Path, **overrides):
    import torch

    from bertprep.bert_model.pretrain.trainer import train
    from model_factory import tiny_train_config

    torch.set_num_threads(1)
    return train(tiny_train_config(shards, out, **{"max_steps": 4, "warmup_steps": 1, "device": "cpu", **overrides}))


@pytest.mark.parametrize(
    "name",
    [
        "sop-fast",
        pytest.param("none-exact", marks=pytest.mark.slow),
        pytest.param("none-dynamic", marks=pytest.mark.slow),
    ],
)  # (slow ones: make test)
def test_train_runs_on_each_objective(shard_sets, tmp_path, name):
    result = _train(shard_sets[name], tmp_path / "run", eval_shards=str(shard_sets[name]), eval_batches=2)
    assert result.step == 4
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_lines = [x for x in lines if x["split"] == "train"]
    eval_line = [x for x in lines if x["split"] == "eval"][-1]
    for line in train_lines + [eval_line]:
        assert np.isfinite(line["mlm_loss"])
        if name.startswith("none"):  # no sentence label: the masked LM alone
            assert line["nsp_loss"] is None and line["nsp_accuracy"] is None
            assert line["loss"] == pytest.approx(line["mlm_loss"])
        else:
            assert 0 <= line["nsp_accuracy"] <= 1
            assert line["loss"] == pytest.approx(line["mlm_loss"] + line["nsp_loss"])


def test_dynamic_masking_of_none_rows_never_masks_a_separator(shard_sets):
    from bertprep.bert_model.pretrain.data import ShardDataset

    dataset = ShardDataset(
        str(shard_sets["none-dynamic"]), batch_size=16, seed=3, shuffle_buffer_size=16, infinite=False
    )
    batches = 0
    for batch, _state in dataset:
        assert "next_sentence_label" not in batch
        input_ids, labels = np.asarray(batch["input_ids"]), np.asarray(batch["masked_lm_ids"])
        picked = np.take_along_axis(input_ids, np.asarray(batch["masked_lm_positions"]), axis=1)
        real = labels != -100
        assert real.any(axis=1).all()
        assert not np.isin(labels[real], [CLS, SEP]).any()
        assert (picked[real] != CLS).all()  # ([SEP] may be a random replacement: range(vocab_size))
        batches += 1
    assert batches >= 2


@pytest.mark.slow
def test_export_of_a_none_run_loads_in_transformers(shard_sets, tmp_path):
    transformers = need_module("transformers")
    import torch
    from safetensors.torch import load_file

    from bertprep.bert_model.hf.export import export_model

    result = _train(shard_sets["none-exact"], tmp_path / "run", weight_decay=0.0, save_every=2)
    # without a sentence task the NSP head (pooler + seq_relationship) gets no gradient: as initialised
    before, after = (
        load_file(str(tmp_path / "run" / "checkpoints" / f"step-00000{k}" / "model.safetensors")) for k in (2, 4)
    )
    for key in ("cls.seq_relationship.weight", "cls.seq_relationship.bias", "bert.pooler.dense.weight"):
        assert torch.equal(before[key], after[key]), key
    assert not torch.equal(before["cls.predictions.bias"], after["cls.predictions.bias"])
    exported = export_model(str(tmp_path / "run"), str(tmp_path / "hf"))
    assert exported.source.architecture == "BertForPreTraining"
    mlm = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    ids = torch.tensor([[CLS, 10, 11, MASK, 12, SEP]])
    with torch.no_grad():
        ours = result.model.eval()(ids, masked_lm_positions=torch.arange(6)[None]).prediction_logits
        theirs = mlm(input_ids=ids).logits
    assert torch.allclose(ours, theirs, atol=1e-5)
    transformers.BertForPreTraining.from_pretrained(str(tmp_path / "hf"))  # loads too, NSP head as initialised


@pytest.mark.slow
def test_two_process_ddp_trains_on_none_shards(tmp_path):
    """Without a sentence label the NSP head gets no gradient; DDP (which expects a gradient for every
    parameter) must still average and keep the replicas identical."""
    from ddp_factory import run_worker

    made = _run(
        [
            "make-shards",
            "-i",
            f"{FIXTURES}/a.txt,{FIXTURES}/b.txt",
            "--vocab",
            str(FIXTURES / "vocab.txt"),
            "-o",
            str(tmp_path / "shards"),
            "--max-seq-length",
            "32",
            "--max-predictions-per-seq",
            "5",
            "--dupe-factor",
            "1",
            "--num-shards",
            "4",
            "-q",
            "--objective",
            "none",
            *BEAM_IN_PROCESS,
        ]
    )
    assert made.exit_code == 0, made.output
    out = tmp_path / "run"
    proc = run_worker(tmp_path / "shards", out, {})
    assert proc.returncode == 0, proc.stderr[-8000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["digest"] == ranks[1]["digest"]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [2, 4] and all(x["nsp_loss"] is None for x in lines)
