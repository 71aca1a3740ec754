"""make-shards end to end through Beam: determinism across worker counts, shard balance, the manifest as
the commit marker, statistics that match the rows, and the failure modes users hit."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from beam_workers_factory import two_workers
from bertprep.core import schema
from bertprep.pipeline.beam.run import MakeShardsError, run_make_shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.shards.inspection import iter_rows
from bertprep.pipeline.text.tokenization import VocabError, load_vocab
from conftest import FIXTURES

FIXTURES = FIXTURES / "pipeline"
VOCAB = str(FIXTURES / "vocab.txt")
INPUTS = (str(FIXTURES / "a.txt"), str(FIXTURES / "b.txt"))
ONE_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _config(out: Path, **kw) -> ShardsConfig:
    instance = kw.pop(
        "instance", InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10))
    )
    base = dict(
        inputs=INPUTS,
        vocab=VOCAB,
        output_dir=str(out),
        instance=instance,
        input_format="bert",
        bucket_size=7,
        num_shards=4,
    )
    base.update(kw)
    return ShardsConfig(**base)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> tuple[Path, dict]:
    """One run of :func:`_config`'s settings on one in-process worker, shared by the tests that compare with
    it or read it: its output folder (read only: a test that changes it copies it first) and manifest."""
    out = tmp_path_factory.mktemp("reference") / "shards"
    return out, run_make_shards(_config(out), ONE_WORKER)


def _shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("shard-*.arrow"))}


@pytest.mark.slow
def test_same_shards_with_one_and_two_workers(tmp_path, reference_run):
    reference, m1 = reference_run
    m2 = run_make_shards(_config(tmp_path / "two"), TWO_WORKERS, workers=two_workers())
    one, two = _shard_bytes(reference), _shard_bytes(tmp_path / "two")
    assert len(one) == 4 and one == two  # byte-identical
    assert m1["shards"] == m2["shards"] and m1["statistics"] == m2["statistics"]
    assert m1["statistics"]["buckets"] > 1  # really several buckets (30 documents / bucket size 7)


@pytest.mark.slow
def test_file_scope_is_deterministic_too(tmp_path):
    run_make_shards(_config(tmp_path / "one", pairing_scope="file"), ONE_WORKER)
    run_make_shards(_config(tmp_path / "two", pairing_scope="file"), TWO_WORKERS, workers=two_workers())
    assert _shard_bytes(tmp_path / "one") == _shard_bytes(tmp_path / "two")


@pytest.mark.slow
def test_other_seed_other_shards(tmp_path, reference_run):
    run_make_shards(
        _config(
            tmp_path / "b",
            instance=InstanceConfig(
                max_seq_length=64, dupe_factor=2, random_seed=1, mlm=MaskingConfig(max_predictions_per_seq=10)
            ),
        ),
        ONE_WORKER,
    )
    assert _shard_bytes(reference_run[0]) != _shard_bytes(tmp_path / "b")


def test_manifest_describes_the_shards_exactly(reference_run):
    out, manifest = reference_run
    vocab = load_vocab(VOCAB)
    assert manifest["format_version"] == schema.FORMAT_VERSION
    assert manifest["vocab"]["sha256"] == vocab.sha256 and manifest["vocab"]["size"] == vocab.size
    assert manifest["vocab"]["special_token_ids"] == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
    assert (out / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == vocab.tokens
    assert manifest["config"]["max_seq_length"] == 64 and manifest["config"]["dupe_factor"] == 2
    rows_per_shard = [s["rows"] for s in manifest["shards"]]
    assert max(rows_per_shard) - min(rows_per_shard) <= 1
    for entry in manifest["shards"]:
        path = out / entry["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
        table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
        assert table.schema.equals(schema.shard_schema(vocab.size))
        assert table.num_rows == entry["rows"]
        assert sum(len(x) for x in table.column("input_ids").to_pylist()) == entry["tokens"]
    rows = list(iter_rows(str(out), manifest))
    stats = manifest["statistics"]
    assert stats["instances"] == len(rows) == sum(rows_per_shard)
    assert stats["tokens"] == sum(len(r["input_ids"]) for r in rows)
    assert stats["masked"]["positions"] == sum(len(r["masked_lm_positions"]) for r in rows)
    assert stats["not_next_share"] == pytest.approx(sum(r["next_sentence_label"] for r in rows) / len(rows), abs=1e-6)
    assert sum(stats["length_histogram"].values()) == len(rows)
    assert stats["documents"]["read"] == 30 and stats["documents"]["used"] == 30
    cls, sep = vocab.token_to_id["[CLS]"], vocab.token_to_id["[SEP]"]
    for r in rows:
        tokens = list(r["input_ids"])
        for pos, label in zip(r["masked_lm_positions"], r["masked_lm_ids"], strict=True):
            tokens[pos] = label
        assert len(tokens) <= 64 and tokens[0] == cls and tokens.count(sep) == 2 and tokens[-1] == sep
        first_b = r["token_type_ids"].index(1)
        assert tokens[first_b - 1] == sep and set(r["token_type_ids"][:first_b]) == {0}
        assert set(r["token_type_ids"][first_b:]) == {1}
    assert not list(out.glob(".bertprep-tmp-*"))  # temporary bucket files are gone


def test_statistics_on_a_larger_run_are_the_papers_ratios(tmp_path):
    config = _config(tmp_path / "out", instance=InstanceConfig(dupe_factor=10), bucket_size=0, num_shards=0)
    stats = run_make_shards(config, ONE_WORKER)["statistics"]
    m = stats["masked"]
    assert abs(m["mask_share"] - 0.8) < 0.02 and abs(m["random_share"] - 0.1) < 0.02
    assert abs(m["kept_share"] - 0.1) < 0.02
    assert 0.14 < m["per_token"] < 0.16
    assert 0.48 < stats["not_next_share"] < 0.60
    assert max(int(k) for k in stats["length_histogram"]) <= 128


@pytest.mark.slow
def test_existing_shards_are_refused_unless_overwrite(tmp_path, reference_run):
    out = tmp_path / "out"
    shutil.copytree(reference_run[0], out)  # a finished run of these settings
    with pytest.raises(MakeShardsError, match=r"already holds shards.*--overwrite"):
        run_make_shards(_config(out), ONE_WORKER)
    manifest = run_make_shards(_config(out, num_shards=2, overwrite=True), ONE_WORKER)
    assert sorted(p.name for p in out.glob("shard-*")) == [s["file"] for s in manifest["shards"]]
    assert len(manifest["shards"]) == 2  # the four old shards are gone


def test_a_run_that_makes_nothing_fails_and_leaves_no_manifest(tmp_path):
    empty_docs = tmp_path / "blank.txt"
    empty_docs.write_text("\u00a0\n\n\x01\x02\n\u200b\n\n", encoding="utf-8")  # whitespace/control chars only
    out = tmp_path / "out"
    with pytest.raises(MakeShardsError, match="no instances"):
        run_make_shards(_config(out, inputs=(str(empty_docs),)), ONE_WORKER)
    assert not (out / "manifest.json").exists()
    assert not list(out.glob(".bertprep-tmp-*")) and not list(out.glob("shard-*"))


def test_vocab_without_special_tokens_is_refused(tmp_path):
    bad = tmp_path / "vocab.txt"
    bad.write_text("[PAD]\n[UNK]\n[CLS]\nthe\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"vocab.txt: missing special token\(s\) \[SEP\], \[MASK\]"):
        run_make_shards(_config(tmp_path / "out", vocab=str(bad)), ONE_WORKER)


@pytest.mark.slow
def test_dynamic_masking_writes_unmasked_pairs_once(tmp_path, reference_run):
    out = tmp_path / "out"
    manifest = run_make_shards(_config(out, masking="dynamic"), ONE_WORKER)
    rows = list(iter_rows(str(out), manifest))
    assert rows and all(not r["masked_lm_positions"] and not r["masked_lm_ids"] for r in rows)
    assert 4 not in {t for r in rows for t in r["input_ids"]}  # no [MASK]
    static = reference_run[1]  # _config's settings: dupe_factor=2, masked
    # one copy instead of dupe_factor copies (pairing draws differ, so compare sizes, not rows)
    assert abs(manifest["statistics"]["instances"] * 2 / static["statistics"]["instances"] - 1) < 0.15
    assert manifest["config"]["masking"] == "dynamic"


@pytest.mark.slow
def test_fast_sampling_is_deterministic_and_has_the_exact_modes_statistics(tmp_path):
    instance = InstanceConfig(dupe_factor=5)
    exact = run_make_shards(_config(tmp_path / "exact", instance=instance, bucket_size=0), ONE_WORKER)
    fast1 = run_make_shards(_config(tmp_path / "f1", instance=instance, bucket_size=0, sampling="fast"), ONE_WORKER)
    fast2 = run_make_shards(
        _config(tmp_path / "f2", instance=instance, bucket_size=0, sampling="fast"), TWO_WORKERS, workers=two_workers()
    )
    assert _shard_bytes(tmp_path / "f1") == _shard_bytes(tmp_path / "f2")
    assert fast1["statistics"] == fast2["statistics"]
    assert _shard_bytes(tmp_path / "f1") != _shard_bytes(tmp_path / "exact")
    # Loose here (30 documents: one seed's shares swing by several points in either mode); the
    # distributions are compared over many seeds in test_instances.py.
    e, f = exact["statistics"], fast1["statistics"]
    assert abs(f["instances"] / e["instances"] - 1) < 0.1
    assert abs(f["not_next_share"] - e["not_next_share"]) < 0.05
    assert abs(f["masked"]["per_token"] - e["masked"]["per_token"]) < 0.003
    for kind in ("mask_share", "random_share", "kept_share"):
        assert abs(f["masked"][kind] - e["masked"][kind]) < 0.015
    report_rows = list(iter_rows(str(tmp_path / "f1"), fast1))
    assert all(len(r["input_ids"]) <= 128 for r in report_rows)


def test_bad_lines_are_counted_in_the_manifest(tmp_path):
    text = (FIXTURES / "a.txt").read_bytes()
    messy = tmp_path / "messy.txt"
    messy.write_bytes(b"x" * 5000 + b"\n" + b"Caf\xe9 in Latin-1.\nAnother line.\n\n\n\n" + text)
    manifest = run_make_shards(_config(tmp_path / "out", inputs=(str(messy),), max_line_chars=2000), ONE_WORKER)
    stats = manifest["statistics"]
    assert stats["lines_skipped"].get("over_long_line") == 1
    assert stats["undecodable_lines"] == 1
    assert stats["documents"]["skipped"].get("empty", 0) >= 1  # the extra blank lines
    assert stats["documents"]["used"] == 16


def test_unknown_reader_options_are_refused_before_anything_runs(tmp_path):
    from bertprep.pipeline.readers import InputError

    with pytest.raises(InputError, match="--segmenter"):
        run_make_shards(_config(tmp_path / "out", segmenter="nltk"), ONE_WORKER)
    with pytest.raises(InputError, match="encoding"):
        run_make_shards(_config(tmp_path / "out", encoding="no-such-codec"), ONE_WORKER)
    assert not (tmp_path / "out").exists()


def test_local_default_uses_every_core_in_separate_processes():

    from apache_beam.options.pipeline_options import DirectOptions

    from bertprep.pipeline.beam.run import default_pipeline_options

    direct = default_pipeline_options([]).view_as(DirectOptions)
    assert direct.direct_num_workers == os.cpu_count()
    if os.cpu_count() > 1:
        assert direct.direct_running_mode == "multi_processing"
    chosen = default_pipeline_options(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    assert chosen.view_as(DirectOptions).direct_num_workers == 1
    assert chosen.view_as(DirectOptions).direct_running_mode == "in_memory"
