"""``--input-format hf``: Hugging Face ``datasets`` on disk read with pyarrow (pipeline/readers/hf.py).

The datasets are made here with ``datasets`` (a dev-only dependency); reading them needs only pyarrow. A
dataset reads as the same documents as the equivalent JSON lines, and make-shards writes the same shards.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.pipeline import readers
from bertprep.pipeline.readers import InputError, ReaderStats, detect_format, expand_inputs, read_documents
from conftest import FIXTURES, need_module

datasets = need_module("datasets")

TEXTS = [
    "Dr. Watson arrived. He was late.\nA second paragraph.",
    "",
    "One sentence.",
    "The lighthouse stood on the rock. Its lamp was lit at dusk.\n\nShips passed it at night.",
    "Bread is made of flour, water and salt. It is baked in an oven.",
    "The river rose after the rain. The bridge was closed for a day.",
]
VOCAB = str(FIXTURES / "pipeline" / "vocab.txt")
BEAM_IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def _dataset():
    return datasets.Dataset.from_dict({"id": list(range(len(TEXTS))), "content": TEXTS})


def _jsonl(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "content": t}) + "\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    return path


def _read(inputs, input_format="hf", **kw):
    stats = ReaderStats()
    docs = [
        d
        for path in expand_inputs(inputs)
        for d in read_documents(path, input_format, text_field="content", stats=stats, **kw)
    ]
    return docs, stats


def test_a_save_to_disk_directory_reads_as_the_same_documents_as_jsonl(tmp_path):
    _dataset().save_to_disk(str(tmp_path / "ds"), num_shards=2)
    arrow_files = sorted(p.name for p in (tmp_path / "ds").glob("*.arrow"))
    assert arrow_files == ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]
    docs, stats = _read(str(tmp_path / "ds"))
    expected, _ = _read(str(_jsonl(tmp_path)), "jsonl")
    assert [d.sentences for d in docs] == [d.sentences for d in expected]
    assert stats.skipped_documents == {"empty": 1}
    assert stats.bytes == sum(len(t.encode()) for t in TEXTS)
    # Document ids are (file, row): line is the row's 1-based number in its file (row 1 of shard 0 is empty).
    ids = [(d.source.rsplit("/", 1)[1], d.line - 1) for d in docs]
    assert ids == [
        ("data-00000-of-00002.arrow", 0),
        ("data-00000-of-00002.arrow", 2),
        ("data-00001-of-00002.arrow", 0),
        ("data-00001-of-00002.arrow", 1),
        ("data-00001-of-00002.arrow", 2),
    ]
    # auto picks hf for the .arrow files and passes the metadata files over.
    auto_docs, auto_stats = _read(str(tmp_path / "ds"), "auto")
    assert [d.sentences for d in auto_docs] == [d.sentences for d in docs]
    assert auto_stats.formats == {"hf": 2} and auto_stats.files == 2  # the data files (not the metadata files)
    assert detect_format(str(tmp_path / "ds" / "state.json")) == "hf"


def test_hub_files_parquet_and_arrow_file_format_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(readers.hf, "HF_PARQUET_BATCH_ROWS", 2)
    table = _dataset().data.table
    (tmp_path / "hub" / "data").mkdir(parents=True)
    pq.write_table(table, str(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet"), row_group_size=2)
    with pa.ipc.new_file(str(tmp_path / "cache.arrow"), table.schema) as writer:  # the IPC *file* format
        for batch in table.to_batches(max_chunksize=2):
            writer.write_batch(batch)
    expected, _ = _read(str(_jsonl(tmp_path)), "jsonl")
    for path in (tmp_path / "hub", tmp_path / "cache.arrow"):
        docs, _ = _read(str(path))
        assert [d.sentences for d in docs] == [d.sentences for d in expected]
        assert [d.line for d in docs] == [1, 3, 4, 5, 6]


def test_a_missing_text_field_names_the_available_columns(tmp_path):
    _dataset().save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(InputError, match=r"data-00000-of-00001\.arrow: the dataset has no column 'text' "):
        list(read_documents(str(tmp_path / "ds" / "data-00000-of-00001.arrow"), "hf"))
    with pytest.raises(InputError, match=r"\(its columns: id, content\); name the text column with --text-field"):
        list(read_documents(str(tmp_path / "ds" / "data-00000-of-00001.arrow"), "hf"))
    with pytest.raises(InputError, match="column 'id' has type int64, not string"):
        list(read_documents(str(tmp_path / "ds" / "data-00000-of-00001.arrow"), "hf", text_field="id"))
    (tmp_path / "fake.arrow").write_text("not arrow\n")
    with pytest.raises(InputError, match=r"fake\.arrow: not an Arrow or Parquet file"):
        list(read_documents(str(tmp_path / "fake.arrow"), "hf"))


def _shards(inputs, out, input_format):
    args = ["make-shards", "-i", inputs, "--input-format", input_format, "--text-field", "content", "--vocab", VOCAB]
    args += ["-o", str(out), "--max-seq-length", "32", "--max-predictions-per-seq", "5", "--dupe-factor", "2", "-q"]
    result = CliRunner().invoke(cli, args + BEAM_IN_PROCESS, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    rows = [pa.ipc.open_file(str(out / s["file"])).read_all().to_pylist() for s in manifest["shards"]]
    return manifest["statistics"], rows


def test_make_shards_from_a_dataset_writes_the_shards_of_the_equivalent_jsonl(tmp_path):
    _dataset().save_to_disk(str(tmp_path / "ds"))
    from_hf, hf_rows = _shards(str(tmp_path / "ds"), tmp_path / "hf-shards", "hf")
    from_jsonl, jsonl_rows = _shards(str(_jsonl(tmp_path)), tmp_path / "jsonl-shards", "jsonl")
    assert from_hf["instances"] == from_jsonl["instances"] > 0
    assert hf_rows == jsonl_rows


def test_build_vocab_reads_a_dataset_and_names_a_missing_field(tmp_path):
    _dataset().save_to_disk(str(tmp_path / "ds"))
    args = ["build-vocab", str(tmp_path / "ds"), "--input-format", "hf", "--vocab-size", "200", "-q"]
    result = CliRunner().invoke(cli, [*args, "--text-field", "content", "-o", str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    assert "input: 1 files, 5 documents" in result.output  # (dataset_info.json and state.json are no input)
    missing = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "v2")])
    assert missing.exit_code != 0 and "(its columns: id, content)" in missing.output
