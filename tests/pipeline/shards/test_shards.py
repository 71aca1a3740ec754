"""Shard planning and writing (``pipeline/shards/store.py``): balanced ranges, exact rows, recorded checksums."""

from __future__ import annotations

import hashlib
import random

import pyarrow as pa
import pytest

from bertprep.core import schema
from bertprep.pipeline.shards import store as shards

VOCAB_SIZE = 1000


def _rows(n: int, first: int) -> pa.Table:
    ids = [[2, first + i, 3, 7, 3] for i in range(n)]
    return pa.Table.from_pydict(
        {
            "input_ids": ids,
            "token_type_ids": [[0, 0, 0, 1, 1]] * n,
            "masked_lm_positions": [[1]] * n,
            "masked_lm_ids": [[first + i] for i in range(n)],
            "next_sentence_label": [i % 2 for i in range(n)],
        },
        schema=schema.shard_schema(VOCAB_SIZE),
    )


@pytest.mark.parametrize("seed", range(5))
def test_plans_cover_every_row_once_in_bucket_order_and_are_balanced(seed):
    rng = random.Random(seed)
    buckets = [(key, f"b{key}", rng.randint(0, 40)) for key in rng.sample(range(100), 12)]
    total = sum(rows for _, _, rows in buckets)
    for num_shards in (1, 2, 3, 7):
        plans = shards.plan_shards(buckets, num_shards)
        sizes = [p.rows for p in plans]
        assert [p.index for p in plans] == list(range(num_shards)) and sum(sizes) == total
        assert max(sizes) - min(sizes) <= 1
        covered = [(path, row) for p in plans for path, lo, hi in p.slices for row in range(lo, hi)]
        expected = [(path, row) for _, path, rows in sorted(buckets) for row in range(rows)]
        assert covered == expected  # every row once, bucket-key order, contiguous ranges
        assert all(sum(hi - lo for _, lo, hi in p.slices) == p.rows for p in plans)


def test_number_of_shards_defaults_to_one_per_50000_rows():
    assert shards.choose_num_shards(10, 0) == 1
    assert shards.choose_num_shards(50_001, 0) == 2
    assert shards.choose_num_shards(10, 4) == 4


def test_written_shards_hold_the_planned_rows_and_their_recorded_sha256(tmp_path):
    metas = []
    for key, n in enumerate((5000, 0, 3001)):  # more rows than a record batch; an empty bucket
        path = str(tmp_path / f"bucket-{key}.arrows")
        assert shards.write_bucket_file(path, _rows(n, 10 + key), VOCAB_SIZE) == n
        metas.append((key, path, n))
    expected = pa.concat_tables([_rows(5000, 10), _rows(3001, 12)])
    written = []
    for plan in shards.plan_shards(metas, 3):
        entry = shards.write_shard(str(tmp_path), plan, VOCAB_SIZE)
        data = (tmp_path / entry["file"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
        table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        assert table.num_rows == entry["rows"] == plan.rows and entry["tokens"] == 5 * plan.rows
        assert all(b.num_rows <= shards.ROWS_PER_RECORD_BATCH for b in table.to_batches())
        written.append(table)
    assert pa.concat_tables(written).equals(expected)


def test_counts_merge_recursively_and_refuse_mismatched_kinds():
    merged = shards.merge_counts({"a": 1, "d": {"x": 2.5}}, {"a": 2, "b": 3, "d": {"x": 1, "y": 1}})
    assert merged == {"a": 3, "b": 3, "d": {"x": 3.5, "y": 1}}
    assert shards.merge_counts(None, {"a": 1}) == {"a": 1}
    with pytest.raises(TypeError, match="cannot merge dict with int"):
        shards.merge_counts({"a": 1}, 2)
