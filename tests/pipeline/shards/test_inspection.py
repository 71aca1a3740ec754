"""``inspect``'s statistics view shows what the shards were made with."""

from __future__ import annotations

from bertprep.pipeline.shards.inspection import _shown_config_value


def test_dupe_factor_shown_is_the_one_the_shards_were_made_with():
    """Round two: dynamic-masking shards (made in one pass) showed the requested dupe_factor=10."""
    assert _shown_config_value({"masking": "dynamic", "dupe_factor": 10}, "dupe_factor") == (
        "1 (dynamic masking; 10 requested)"
    )
    assert _shown_config_value({"masking": "dynamic", "dupe_factor": 1}, "dupe_factor") == "1"
    assert _shown_config_value({"masking": "static", "dupe_factor": 10}, "dupe_factor") == "10"
    assert _shown_config_value({"dupe_factor": 5}, "dupe_factor") == "5"  # manifests before --masking


def test_one_shard_reader_holds_the_bytes_it_read(tmp_path):
    """``schema.read_shard`` (the loader's and inspect's one reader) reads the file once into memory: the file
    truncated afterwards (a copy over the shard directory) changes nothing already read (a memory map would
    fault), and a truncated file is refused as not Arrow."""
    import pyarrow as pa
    import pytest

    from bertprep.core import schema

    path = tmp_path / "shard.arrow"
    table = pa.table({"input_ids": pa.array([[2, 7, 3], [2, 8, 9, 3]], pa.list_(pa.int32()))})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    reader = schema.read_shard(str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert reader.get_batch(0).to_pylist() == table.to_pylist()
    with pytest.raises(pa.ArrowException):
        schema.read_shard(str(path))
