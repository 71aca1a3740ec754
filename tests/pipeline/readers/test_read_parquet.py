"""Parquet files (``readers/parquet.py`` ``read_parquet``): the text column read in batches."""

from __future__ import annotations

import pytest

from bertprep.pipeline import readers
from bertprep.pipeline.readers import InputError, detect_format
from readers_factory import read_all


def write_parquet(path, table):
    import pyarrow.parquet as pq

    pq.write_table(table, str(path), row_group_size=2)


def test_parquet_reads_the_text_column_in_batches(tmp_path, monkeypatch):
    import pyarrow as pa

    monkeypatch.setattr(readers.parquet, "PARQUET_BATCH_ROWS", 2)
    texts = ["Dr. Watson arrived. He was late.\nA second paragraph.", None, "", "One sentence.", "Last one. Really."]
    path = tmp_path / "corpus.parquet"
    write_parquet(path, pa.table({"id": list(range(5)), "content": texts}))
    docs, stats = read_all(path, text_field="content")
    assert stats.formats == {"parquet": 1}
    assert [d.sentences for d in docs] == [
        ["Dr. Watson arrived.", "He was late.", "A second paragraph."],
        ["One sentence."],
        ["Last one.", "Really."],
    ]
    assert [d.ordinal for d in docs] == [0, 1, 2]
    assert stats.skipped_documents == {"empty": 2}
    assert stats.bytes == sum(len(t.encode()) for t in texts if t)
    # Detected by the magic bytes too, whatever the name.
    renamed = tmp_path / "corpus.bin"
    renamed.write_bytes(path.read_bytes())
    assert detect_format(str(renamed)) == "parquet"


def test_parquet_errors_name_the_column_option(tmp_path):
    import pyarrow as pa

    path = tmp_path / "c.parquet"
    write_parquet(path, pa.table({"body": ["Some text."], "n": [1]}))
    with pytest.raises(
        InputError, match=r"c\.parquet: the Parquet file has no column 'text' \(its columns: body, n\).*--text-field"
    ):
        read_all(path)
    with pytest.raises(InputError, match=r"c\.parquet: column 'n' has type int64, not string.*--text-field"):
        read_all(path, text_field="n")
    not_parquet = tmp_path / "fake.parquet"
    not_parquet.write_text("hello\n")
    with pytest.raises(InputError, match=r"fake\.parquet: not a readable Parquet file.*--input-format"):
        read_all(not_parquet)
