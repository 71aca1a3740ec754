"""make-shards --output-format mds | megatron, and the dataset card of Arrow shards: each output read with the
trainer's own library (mosaicml-streaming, megatron-core, Hugging Face datasets) holds the token ids of the
Arrow shards of the same input, vocab and seed, in the same order; bad input is refused in one line."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner

from beam_workers_factory import for_the_cli
from bertprep.cli.main import cli
from bertprep.core import schema, storage
from bertprep.pipeline.shards import formats
from conftest import need_module
from pipeline_factory import FILES, make_shards, tokenized

for _library in ("streaming", "megatron"):  # the mds and megatron extras (imported by the runs, not here)
    if importlib.util.find_spec(_library) is None:
        need_module(_library)  # skips, or fails under CI=true

#: The runs' settings besides the fixture's: a held-out set, so that both sets and the card's two splits exist.
RUN = ("--eval-fraction", "0.2")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One make-shards run per format on the fixture corpus (same vocab and seed), its output folder each."""
    root = tmp_path_factory.mktemp("formats")
    out = {}
    for fmt in formats.LIBRARIES.keys() | {"arrow"}:
        out[fmt] = root / fmt
        result = make_shards(out[fmt], "--output-format", fmt, *RUN)
        assert result.exit_code == 0, result.output
    return out


def _arrow_rows(folder: Path) -> list[dict]:
    manifest = storage.read_manifest(str(folder))
    return [
        row
        for path in schema.shard_paths(str(folder), manifest)
        for row in schema.read_shard(path).read_all().to_pylist()
    ]


def _streaming_rows(folder: Path, split: str | None = None) -> list[dict]:
    """The rows as a Composer trainer reads them: ``StreamingDataset(local=..., split=...)``, as the YAML of
    docs/other-trainers.md sets them (the training set: split None; the held-out set: split "eval")."""
    streaming = formats.import_streaming()
    dataset = streaming.StreamingDataset(local=str(folder), split=split, shuffle=False, batch_size=1)
    return [dataset[i] for i in range(len(dataset))]


@pytest.mark.slow  # the module fixture's three runs: ~10 s on 2 busy cores
@pytest.mark.parametrize("subset", ["", schema.EVAL_DIR])
def test_streaming_reads_the_arrow_rows_in_order(runs, subset):
    arrow = _arrow_rows(runs["arrow"] / subset)
    mds = _streaming_rows(runs["mds"], subset or None)
    assert len(mds) == len(arrow) > 0
    for a, m in zip(arrow, mds, strict=True):
        assert m["input_ids"].dtype == np.uint16  # the fixture vocab fits
        assert m["input_ids"].tolist() == a["input_ids"] and m["len"] == len(a["input_ids"])
        for name in ("token_type_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_label"):
            assert np.asarray(m[name]).tolist() == a[name]
    index = json.loads((runs["mds"] / subset / "index.json").read_text())
    folders = sorted({s["raw_data"]["basename"].split("/")[0] for s in index["shards"]})
    assert folders == [e["file"] for e in json.loads((runs["mds"] / subset / "manifest.json").read_text())["shards"]]


@pytest.mark.slow
def test_datasets_loads_the_shard_directory_with_no_arguments(runs, tmp_path):
    datasets = pytest.importorskip("datasets")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = datasets.load_dataset(str(runs["arrow"]), cache_dir=str(tmp_path / "cache"))
    assert set(loaded) == {"train", formats.EVAL_SPLIT}
    assert loaded["train"]["input_ids"] == [r["input_ids"] for r in _arrow_rows(runs["arrow"])]
    assert loaded[formats.EVAL_SPLIT]["input_ids"] == [r["input_ids"] for r in _arrow_rows(runs["arrow"] / "eval")]
    assert str(loaded["train"].features["input_ids"].feature) == "Value('uint16')"


def _megatron_documents(folder: Path) -> list[list[list[int]]]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(folder / formats.MEGATRON_PREFIX))
    bounds = dataset.document_indices
    return [[dataset[s].tolist() for s in range(bounds[d], bounds[d + 1])] for d in range(len(bounds) - 1)]


def _sentences(doc: tuple) -> list[list[int]]:
    ids, lengths = np.frombuffer(doc[2], np.uint32), np.frombuffer(doc[3], np.int32)
    ends = np.cumsum(lengths)
    return [ids[e - n : e].tolist() for e, n in zip(ends, lengths, strict=True)]


def _segment_a(row: dict) -> list[int]:
    ids = list(row["input_ids"])
    for position, label in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
        ids[position] = label  # the masking undone
    return ids[1 : ids.index(ids[-1])]  # between [CLS] and the first [SEP]


@pytest.mark.slow
def test_megatron_holds_the_documents_of_the_arrow_rows_in_input_order(runs):
    train, held_out = _megatron_documents(runs["megatron"]), _megatron_documents(runs["megatron"] / "eval")
    oracle = [d for d in (_sentences(doc) for doc in tokenized()) if d]  # input order: file, then document
    assert [d for d in oracle if d in train] == train and len(train) + len(held_out) == len(oracle)
    assert sorted(map(str, train + held_out)) == sorted(map(str, oracle))
    manifest = json.loads((runs["megatron"] / "manifest.json").read_text())
    assert manifest["megatron"]["documents"] == len(train)
    # the same run's Arrow instances: each A segment is a run of consecutive word pieces of one document
    flat = [[i for sentence in doc for i in sentence] for doc in train]
    for row in _arrow_rows(runs["megatron"]):
        a = _segment_a(row)
        assert any(a == f[i : i + len(a)] for f in flat for i in range(len(f) - len(a) + 1)), a


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["mds", "megatron"])
def test_inspect_verify_checks_the_format_files(runs, fmt, tmp_path):
    folder = tmp_path / fmt
    shutil.copytree(runs[fmt], folder)
    result = CliRunner().invoke(cli, ["inspect", str(folder), "-n", "1", "--verify"])
    assert result.exit_code == 0, result.output
    assert f"{fmt} files match the manifest" in result.output
    target = next(iter(sorted(folder.glob("shard-*/shard.*.mds")))) if fmt == "mds" else folder / "text_sentence.bin"
    data = bytearray(target.read_bytes())
    data[-1] ^= 1
    target.write_bytes(bytes(data))
    result = CliRunner().invoke(cli, ["inspect", str(folder), "-n", "0", "--verify"])
    assert result.exit_code == 1 and "verification failed" in result.output
    assert os.path.relpath(target, folder) in result.output


@pytest.mark.slow
def test_bertprep_train_refuses_mds_shards_in_one_line(runs):
    from bertprep.bert_model.pretrain.shard_info import read_shard_info

    with pytest.raises(ValueError, match="--output-format arrow"):
        read_shard_info(str(runs["mds"]))


def test_a_missing_library_is_refused_before_any_work(tmp_path, monkeypatch):
    real = formats.importlib.util.find_spec
    monkeypatch.setattr(
        formats.importlib.util, "find_spec", lambda name, *a: None if name == "streaming" else real(name, *a)
    )
    result = make_shards(tmp_path / "out", "--output-format", "mds")
    assert result.exit_code == 2 and "pip install 'bertprep[mds]'" in result.output
    assert not (tmp_path / "out").exists()


def test_a_vocab_the_format_cannot_hold_is_refused():
    with pytest.raises(formats.FormatError, match="does not fit"):
        formats.check_output_format("megatron", 2**31 + 2)
    formats.check_output_format("megatron", 2**31)  # ids up to 2**31 - 1: int32


def test_bad_mds_options_are_refused_in_one_line(tmp_path):
    result = make_shards(tmp_path / "out", "--output-format", "mds", "--mds-compression", "lz99")
    assert result.exit_code == 2 and "--mds-compression 'lz99' is not one of" in result.output
    result = make_shards(tmp_path / "out", "--mds-hashes", "sha1")
    assert result.exit_code == 2 and "--output-format mds only" in result.output


@pytest.mark.slow  # three runs: ~3 s
def test_another_tools_files_are_never_replaced_and_formats_replace_each_other(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "index.json").write_text('{"version": 2, "shards": []}')  # another tool's MDS index
    result = make_shards(out, "--output-format", "mds", "--overwrite")
    assert result.exit_code == 1 and "index.json is not make-shards'" in result.output
    assert (out / "index.json").read_text() == '{"version": 2, "shards": []}' and len(os.listdir(out)) == 1
    (out / "index.json").unlink()
    assert make_shards(out, "--output-format", "mds").exit_code == 0
    assert make_shards(out, "--overwrite").exit_code == 0  # Arrow now: the MDS set goes, sub-folders included
    names = sorted(os.listdir(out))
    assert names == [
        "README.md",
        "manifest.json",
        "shard-00000-of-00002.arrow",
        "shard-00001-of-00002.arrow",
        "vocab.txt",
    ]
    # MDS again, one shard: the Arrow shards and the card (recorded by the Arrow manifest) go; no folder is left
    assert make_shards(out, "--output-format", "mds", "--overwrite", num_shards=1).exit_code == 0
    assert sorted(os.listdir(out)) == ["index.json", "manifest.json", "shard-00000-of-00001", "vocab.txt"]
    assert sorted(p.name for p in (out / "shard-00000-of-00001").iterdir()) == ["index.json", "shard.00000.mds"]


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


@pytest.mark.slow  # a run on two worker processes: ~10 s each
@pytest.mark.parametrize("fmt", ["mds", "megatron"])
def test_the_same_bytes_with_two_worker_processes_and_the_corpus_elsewhere(runs, fmt, tmp_path, monkeypatch):
    for_the_cli(monkeypatch)
    corpus = tmp_path / "elsewhere" / "corpus"
    corpus.mkdir(parents=True)
    for path in FILES:
        shutil.copy(path, corpus)
    inputs = ",".join(str(corpus / os.path.basename(p)) for p in FILES)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli,
        [
            "make-shards", "-i", inputs, "--vocab", str(Path(FILES[0]).parent / "vocab.txt"), "-o", str(out),
            "--max-seq-length", "64", "--max-predictions-per-seq", "10", "--dupe-factor", "2", "--num-shards", "2",
            "-q", "--output-format", fmt, *RUN, "--direct_num_workers=2", "--direct_running_mode=multi_processing",
        ],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _files(out) == _files(runs[fmt])
    got, want = (json.loads((f / "manifest.json").read_text()) for f in (out, runs[fmt]))
    assert got["shards"] == want["shards"] and got.get("format_files") == want.get("format_files")


def test_mds_columns_follow_the_vocab_size():
    assert formats.mds_columns(30_522)["input_ids"] == "ndarray:uint16"
    assert formats.mds_columns(2**16 + 1)["input_ids"] == "ndarray:uint32"
    columns = formats.mds_columns(50_368, "none", masked=False)
    assert list(columns) == ["input_ids", "token_type_ids", "len"]
    assert pa.uint16() == schema.id_type_for_vocab(50_368)


@pytest.mark.slow  # one run: ~2 s
def test_megatron_parts_of_any_size_merge_into_the_same_files(runs, tmp_path, monkeypatch):
    from bertprep.pipeline.beam import megatron_output

    monkeypatch.setattr(megatron_output, "DOCUMENTS_PER_PART", 4)  # the fixture's 30 documents: 8 parts
    assert make_shards(tmp_path / "out", "--output-format", "megatron", *RUN).exit_code == 0
    assert _files(tmp_path / "out") == _files(runs["megatron"])


def test_settings_a_format_cannot_take_are_refused():
    from pipeline_factory import shards_config

    with pytest.raises(ValueError, match="drop --pairing-scope file"):
        shards_config(output_format="megatron", pairing_scope="file")
    with pytest.raises(ValueError, match="--output-format mds only"):
        shards_config(output_format="megatron", mds_compression="zstd")
    config = shards_config(output_format="mds", mds_hashes=("sha1",))
    assert config.to_dict()["output_format"] == "mds" and config.to_dict()["mds_hashes"] == ["sha1"]
    assert "output_format" not in shards_config().to_dict()  # an Arrow run's manifest is unchanged


def _megatron_parts(folder, count: int) -> list[str]:
    """``count`` small parts written as make-shards' workers write them: their prefixes relative to ``folder``."""
    (folder / formats.MEGATRON_PARTS_DIR).mkdir()
    prefixes = []
    for i in range(count):
        prefix = f"{formats.MEGATRON_PARTS_DIR}/part-{i}"
        documents = [[np.arange(i, i + 5), np.arange(3)], [np.arange(7) + i]]
        formats.write_megatron_part(str(folder / prefix), documents, vocab_size=100)
        prefixes.append(prefix)
    return prefixes


@pytest.mark.parametrize("frozen", [False, True], ids=["a process", "a forked warm worker"])
def test_collections_while_megatron_parts_merge_skip_the_older_objects(tmp_path, frozen):
    """megatron-core's ``add_index`` runs a full ``gc.collect()`` after each part it merges: in a process holding
    Beam, torch and pyarrow, about 1 s per part (an input file's documents), most of a small megatron run. The
    collections during the merge skip the objects that existed before it; in a worker whose imports were frozen
    before it forked (``warm_workers.py``), as in any other process."""
    IndexedDataset = formats._indexed_dataset("IndexedDataset")  # (without megatron.core's import warnings)
    parts = _megatron_parts(tmp_path, 4)
    skipped: list[int] = []  # per full collection during the merge: how many objects it did not walk

    def note(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            skipped.append(gc.get_freeze_count())

    if frozen:
        gc.freeze()  # (the objects a forked warm worker has from its parent)
    made_since = [[i] for i in range(300_000)] if frozen else []  # (what it made since, megatron-core's modules)
    frozen_before, older = gc.get_freeze_count(), len(gc.get_objects()) + gc.get_freeze_count()
    gc.callbacks.append(note)
    try:
        formats.merge_megatron_parts(str(tmp_path), parts, vocab_size=100)
        frozen_after = gc.get_freeze_count()
    finally:
        gc.callbacks.remove(note)
        gc.unfreeze()  # (this process's objects as they were)
    assert len(skipped) >= len(parts)  # (megatron-core's collection after each part)
    assert min(skipped) >= 0.9 * older, (skipped, older)  # every object made before the merge, skipped
    if frozen:  # a worker's objects stay frozen, as its pool made them
        assert frozen_after >= frozen_before
    else:  # the process's objects are collected as before, afterwards
        assert frozen_after == 0
    merged = IndexedDataset(str(tmp_path / formats.MEGATRON_PREFIX))  # the parts' documents, in order
    assert merged.document_indices.tolist() == [0] + [n for i in range(len(parts)) for n in (3 * i + 2, 3 * i + 3)]
    del made_since
