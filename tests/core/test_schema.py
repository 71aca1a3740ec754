"""The shard contract (``core/schema.py``): column types, names, the vocab fingerprint, manifest checks."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pyarrow as pa
import pytest

from bertprep.core import schema, storage


def test_id_type_is_the_smallest_that_holds_every_id():
    assert schema.id_type_for_vocab(30522) == pa.uint16()
    assert schema.id_type_for_vocab(2**16) == pa.uint16()  # ids 0..65535
    assert schema.id_type_for_vocab(2**16 + 1) == pa.uint32()
    with pytest.raises(ValueError, match="vocab_size must be positive"):
        schema.id_type_for_vocab(0)


def test_shard_schema_has_the_contract_columns_and_no_nulls():
    s = schema.shard_schema(120_000)
    assert tuple(s.names) == schema.COLUMNS
    assert s.field("input_ids").type == pa.list_(pa.uint32()) == s.field("masked_lm_ids").type
    assert s.field("masked_lm_positions").type == pa.list_(pa.uint16())
    assert s.field("next_sentence_label").type == pa.uint8()
    assert not any(f.nullable for f in s)


def test_shard_names_round_trip_through_the_pattern():
    name = schema.shard_name(3, 128)
    assert name == "shard-00003-of-00128.arrow"
    assert schema.SHARD_RE.match(name).groups() == ("00003", "00128")
    assert schema.SHARD_RE.match("shard-3-of-128.arrow") is None


def test_vocab_fingerprint_is_the_sha256_of_its_vocab_txt(tmp_path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "##s", "é"]
    path = tmp_path / "vocab.txt"
    path.write_bytes("".join(t + "\n" for t in tokens).encode("utf-8"))
    assert schema.vocab_sha256(tokens) == schema.sha256_file(str(path)) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert schema.vocab_sha256(tokens[::-1]) != schema.vocab_sha256(tokens)  # the order (the ids) counts


def test_read_manifest_refuses_unfinished_other_version_and_missing_shards(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape("no manifest.json; this is not a finished shard directory")):
        storage.read_manifest(str(tmp_path))
    manifest = {"format_version": schema.FORMAT_VERSION, "shards": [{"file": schema.shard_name(0, 1)}]}
    (tmp_path / schema.MANIFEST_NAME).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(
        ValueError, match=re.escape("manifest lists shard-00000-of-00001.arrow but the file is missing")
    ):
        storage.read_manifest(str(tmp_path))
    (tmp_path / schema.shard_name(0, 1)).write_bytes(b"")
    assert schema.shard_paths(str(tmp_path), storage.read_manifest(str(tmp_path))) == [
        str(tmp_path / schema.shard_name(0, 1))
    ]
    (tmp_path / schema.MANIFEST_NAME).write_text(json.dumps(manifest | {"format_version": 99}), encoding="utf-8")
    with pytest.raises(ValueError, match="format_version 99, this bertprep reads version 1"):
        storage.read_manifest(str(tmp_path))


@pytest.mark.parametrize("arrow_type", [pa.uint8(), pa.uint16(), pa.uint32(), pa.int32(), pa.int64(), pa.float32()])
def test_numpy_view_is_to_numpy_without_pandas(arrow_type):
    """``schema.numpy_view`` is what ``to_numpy()`` gives (dtype, values, read-only; a sliced array too) for the
    shard columns' types; nulls raise as ``to_numpy()`` does."""
    array = pa.array(np.arange(40) % 7, type=arrow_type)
    for part in (array, array.slice(5, 11)):
        view, expected = schema.numpy_view(part), part.to_numpy()
        assert view.dtype == expected.dtype and np.array_equal(view, expected) and not view.flags.writeable
    with pytest.raises(pa.ArrowInvalid, match="1 nulls"):
        schema.numpy_view(pa.array([1, None], type=arrow_type))
