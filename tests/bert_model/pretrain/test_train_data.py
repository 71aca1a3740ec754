"""bert_model/pretrain/data.py: collate, shard splitting, shuffling, the resumable cursor and manifest checks."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from bertprep.bert_model.collate import collate
from bertprep.bert_model.pretrain.data import ShardDataset
from bertprep.bert_model.pretrain.loader import ShardLoader
from bertprep.bert_model.pretrain.shard_info import check_compatible, read_shard_info
from shard_factory import SPECIAL_TOKENS, write_shard_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # 2 intra-op threads spin against other processes


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("shards")
    write_shard_dir(
        path,
        num_shards=4,
        rows_per_shard=[25, 25, 24, 24],
        vocab_size=70,
        max_seq_length=24,
        max_predictions_per_seq=4,
        seed=3,
        record_batch_rows=10,
    )
    return str(path)


def _key(batch: dict[str, torch.Tensor], i: int) -> tuple:
    """Identity of instance i of a batch (its unpadded input_ids and masked positions)."""
    n = int(batch["attention_mask"][i].sum())
    return tuple(batch["input_ids"][i, :n].tolist()) + tuple(batch["masked_lm_positions"][i].tolist())


def _keys(batches) -> list[tuple]:
    return [_key(b, i) for b in batches for i in range(b["input_ids"].size(0))]


def _file_order_keys(shard_dir: str) -> list[tuple]:
    ds = ShardDataset(shard_dir, batch_size=1, shuffle=False, infinite=False)
    return _keys(ShardLoader(ds))


def test_collate_pads_to_multiple_of_8():
    rows = [
        {
            "input_ids": np.array([2, 10, 11, 3, 12, 3], np.uint16),
            "token_type_ids": np.array([0, 0, 0, 0, 1, 1]),
            "masked_lm_positions": np.array([1, 4], np.uint16),
            "masked_lm_ids": np.array([17, 18], np.uint16),
            "next_sentence_label": 1,
        },
        {
            "input_ids": np.arange(11, dtype=np.uint16),
            "token_type_ids": np.zeros(11, np.uint8),
            "masked_lm_positions": np.array([5], np.uint16),
            "masked_lm_ids": np.array([9], np.uint16),
            "next_sentence_label": 0,
        },
    ]
    batch = collate(rows, pad_token_id=7)
    assert batch["input_ids"].shape == (2, 16) and batch["masked_lm_positions"].shape == (2, 8)
    assert all(v.dtype == torch.int64 for k, v in batch.items() if k != "cu_seqlens")
    # FlashAttention's varlen segments (int32): each row's tokens, then its padding run.
    assert batch["cu_seqlens"].dtype == torch.int32 and batch["cu_seqlens"].tolist() == [0, 6, 16, 27, 32]
    assert batch["sequence_starts"].tolist() == [0, 16]
    assert batch["input_ids"][0].tolist() == [2, 10, 11, 3, 12, 3] + [7] * 10
    assert batch["attention_mask"].sum(1).tolist() == [6, 11]
    assert batch["token_type_ids"][0].tolist() == [0, 0, 0, 0, 1, 1] + [0] * 10
    assert batch["masked_lm_positions"][0].tolist() == [1, 4, 0, 0, 0, 0, 0, 0]
    assert batch["masked_lm_ids"][0].tolist() == [17, 18] + [-100] * 6
    assert batch["masked_lm_ids"][1].tolist() == [9] + [-100] * 7
    assert batch["next_sentence_label"].tolist() == [1, 0]
    assert collate(rows, pad_to_multiple_of=1)["input_ids"].shape == (2, 11)


def test_one_pass_reads_every_row_once_in_file_order(shard_dir):
    keys = _file_order_keys(shard_dir)
    assert len(keys) == 98 and len(set(keys)) == 98
    ds = ShardDataset(shard_dir, batch_size=8, shuffle=False, infinite=False)
    batches = list(ShardLoader(ds))
    assert [b["input_ids"].size(0) for b in batches] == [8] * 12 + [2]  # the last batch is short
    assert _keys(batches) == keys


def test_seeded_shuffle_covers_every_row(shard_dir):
    file_order = _file_order_keys(shard_dir)

    def one_pass(seed):
        ds = ShardDataset(shard_dir, batch_size=7, seed=seed, shuffle_buffer_size=30, infinite=False)
        return _keys(ShardLoader(ds))

    a, b, c = one_pass(1), one_pass(1), one_pass(2)
    assert sorted(a) == sorted(file_order) and a != file_order
    assert a == b  # same seed, same order
    assert a != c


def test_streams_split_shards_across_ranks_and_workers(shard_dir):
    seen = {}
    for rank in range(2):
        ds = ShardDataset(shard_dir, batch_size=5, rank=rank, world_size=2, num_workers=2, seed=9)
        for worker in range(2):
            stream = ds.stream_index(worker)
            seen[stream] = {epoch: ds.stream_shards(stream, epoch) for epoch in range(3)}
    for epoch in range(3):
        assignment = [seen[s][epoch] for s in range(4)]
        assert sorted(s for shards in assignment for s in shards) == [0, 1, 2, 3]  # disjoint and complete
    assert [seen[s][0] for s in range(4)] != [seen[s][1] for s in range(4)]  # reshuffled each epoch

    # Reading for real: two ranks of one pass see disjoint instances that together are the whole directory.
    per_rank = []
    for rank in range(2):
        ds = ShardDataset(shard_dir, batch_size=4, rank=rank, world_size=2, infinite=False, seed=9)
        per_rank.append(_keys(ShardLoader(ds)))
    assert not set(per_rank[0]) & set(per_rank[1])
    assert sorted(per_rank[0] + per_rank[1]) == sorted(_file_order_keys(shard_dir))


def test_too_few_shards_for_streams_is_refused(shard_dir):
    with pytest.raises(ValueError, match=r"4 shard file\(s\) but training reads 6 streams.*fewer --num-workers"):
        ShardDataset(shard_dir, batch_size=4, world_size=2, num_workers=3)


def _take(it, n):
    return [next(it) for _ in range(n)]


def _same_batches(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize(
    "num_workers,consumed,packing",
    [(0, 23, False), (2, 23, False), (2, 24, False), (0, 23, True), (1, 22, True), (2, 23, True), (2, 24, True)],
)
def test_cursor_resumes_the_exact_batch_sequence(shard_dir, num_workers, consumed, packing):
    def make():
        ds = ShardDataset(
            shard_dir, batch_size=6, seed=4, shuffle_buffer_size=20, num_workers=num_workers, packing=packing
        )
        return ShardLoader(ds, num_workers=num_workers)

    reference = _take(iter(make()), consumed + 12)  # crosses epoch boundaries (98 rows / epoch)
    loader = make()
    first = _take(iter(loader), consumed)
    cursor = json.loads(json.dumps(loader.state_dict()))  # what a checkpoint stores
    assert cursor["batches"] == consumed
    if packing:  # a half-filled packed batch rides in the cursor
        assert any(s["packed"] for s in cursor["streams"])
    resumed = make()
    resumed.load_state_dict(cursor)
    rest = _take(iter(resumed), 12)
    assert _same_batches(first + rest, reference)  # bitwise, every array
    if not packing:
        assert _keys(first) + _keys(rest) == _keys(reference)
    assert max(s["epoch"] for s in resumed.state_dict()["streams"]) >= 1


def _packed_instances(batch: dict[str, torch.Tensor]) -> list[tuple]:
    """The instances of a packed batch, row-major: each one's input_ids (a run of one sequence id in a row)."""
    out = []
    for ids, seq in zip(batch["input_ids"].tolist(), batch["sequence_ids"].tolist(), strict=True):
        for s in sorted(set(seq) - {-1}):
            out.append(tuple(t for t, q in zip(ids, seq, strict=True) if q == s))
    return out


@pytest.fixture(scope="module")
def short_dir(tmp_path_factory):
    """Shards with make-shards' --short-seq-prob 1.0 length distribution (every instance a random length)."""
    path = tmp_path_factory.mktemp("short")
    write_shard_dir(
        path, num_shards=2, rows_per_shard=600, vocab_size=70, max_seq_length=64, seed=5, short_seq_prob=1.0
    )
    return str(path)


def test_packing_fills_the_token_budget_with_every_instance_once(short_dir):
    def one_pass(packing, seed=1, batch_size=16):
        ds = ShardDataset(
            short_dir, batch_size=batch_size, seed=seed, shuffle_buffer_size=100, infinite=False, packing=packing
        )
        return list(ShardLoader(ds))

    def fill(batches):  # real tokens / token slots computed
        return sum(int(b["attention_mask"].sum()) for b in batches) / sum(b["attention_mask"].numel() for b in batches)

    padded, packed = one_pass(False), one_pass(True)
    assert all(b["input_ids"].shape == (16, 64) for b in packed)  # batch_size rows of max_seq_length
    # Every instance exactly once (the same shuffle), in fewer, fuller batches.
    instances = [i for b in packed for i in _packed_instances(b)]
    assert sorted(instances) == sorted(
        tuple(b["input_ids"][i, : int(b["attention_mask"][i].sum())].tolist())
        for b in padded
        for i in range(len(b["input_ids"]))
    )
    assert fill(padded) < 0.7 and fill(packed[:-2]) >= 0.9, (fill(padded), fill(packed[:-2]))  # (the last two: the end)
    assert len(packed) < 0.6 * len(padded)
    assert len(instances) / len(packed) > 1.5 * 16  # instances per step
    # Deterministic per seed; another seed, another order.
    assert _same_batches(one_pass(True), packed) and not _same_batches(one_pass(True, seed=2), packed)


def test_packing_on_full_instances_keeps_about_batch_size_instances(shard_dir):
    # The default length distribution here (16..24 of 24 tokens): few pairs fit a row; a packed step holds
    # about batch_size instances and the rows stay as full as the padded batches.
    ds = ShardDataset(shard_dir, batch_size=6, seed=4, shuffle_buffer_size=20, infinite=False, packing=True)
    batches = list(ShardLoader(ds))
    assert sum(len(_packed_instances(b)) for b in batches) == 98
    assert all(b["input_ids"].shape == (6, 24) for b in batches)


def test_cursor_with_another_layout_restarts_the_epoch(shard_dir, caplog):
    ds = ShardDataset(shard_dir, batch_size=6, seed=4, shuffle_buffer_size=20, num_workers=0)
    loader = ShardLoader(ds)
    _take(iter(loader), 20)  # 20 + 120 rows read: epoch 1
    cursor = loader.state_dict()
    epoch = cursor["streams"][0]["epoch"]
    assert epoch == 1
    other = ShardLoader(ShardDataset(shard_dir, batch_size=6, seed=4, num_workers=2), num_workers=2)
    with caplog.at_level(logging.WARNING):
        other.load_state_dict(cursor)
    assert "restarting the data at the beginning of epoch 1" in caplog.text
    assert [s["epoch"] for s in other.state_dict()["streams"]] == [1, 1]


def test_manifest_checks_name_the_problem(tmp_path, shard_dir):
    info = read_shard_info(shard_dir)
    assert (info.vocab_size, info.max_seq_length, info.num_shards, info.num_rows) == (70, 24, 4, 98)
    with pytest.raises(ValueError, match=r"made with another vocab.*same vocab\.txt"):
        check_compatible(info, vocab_sha256="0" * 64)
    with pytest.raises(ValueError, match=r"vocab of 70 entries but the model has only vocab_size=64 \(their ids"):
        check_compatible(info, vocab_size=64)
    check_compatible(info, vocab_size=128)  # more rows than the vocab (a padded embedding matrix): the ids fit
    with pytest.raises(ValueError, match="max_seq_length=24 but checkpoint x uses max_seq_length=128"):
        check_compatible(info, max_seq_length=128, what="checkpoint x")
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        check_compatible(info, max_position_embeddings=16)
    check_compatible(
        info, vocab_sha256=info.vocab_sha256, vocab_size=70, max_seq_length=24, max_position_embeddings=512
    )
    with pytest.raises(FileNotFoundError, match=re.escape("no manifest.json")):
        read_shard_info(str(tmp_path))


def test_row_count_disagreeing_with_manifest_is_refused(tmp_path):
    path = tmp_path / "s"
    write_shard_dir(path, num_shards=1, rows_per_shard=10)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["shards"][0]["rows"] = 11
    (path / "manifest.json").write_text(json.dumps(manifest))
    ds = ShardDataset(str(path), batch_size=4, shuffle=False, infinite=False)
    with pytest.raises(ValueError, match="holds 10 rows, the manifest says 11"):
        list(ShardLoader(ds))


# ------------------------------------------------------------------------------------------ dynamic masking


@pytest.fixture(scope="module")
def dynamic_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dynamic")
    write_shard_dir(
        path,
        num_shards=2,
        rows_per_shard=1500,
        vocab_size=500,
        max_seq_length=128,
        max_predictions_per_seq=20,
        masking="dynamic",
        seed=7,
    )
    return str(path)


def test_dynamic_masking_follows_the_reference_rule(dynamic_dir):
    info = read_shard_info(dynamic_dir)
    assert info.masking == "dynamic"
    ds = ShardDataset(dynamic_dir, batch_size=100, shuffle=False, infinite=False, seed=1)
    raw = ShardDataset.__new__(ShardDataset)  # the same rows unmasked, for the labels
    raw.__dict__.update(ds.__dict__, masking=None)
    tokens = predicted = masked = kept = replaced = 0
    for batch, original in zip(ShardLoader(ds), ShardLoader(raw), strict=True):
        assert torch.equal(batch["attention_mask"], original["attention_mask"])
        assert original["masked_lm_ids"].eq(-100).all()  # the shards themselves hold no predictions
        for i in range(batch["input_ids"].size(0)):
            n = int(batch["attention_mask"][i].sum())
            real = batch["masked_lm_ids"][i] != -100
            positions = batch["masked_lm_positions"][i][real]
            labels = batch["masked_lm_ids"][i][real]
            orig = original["input_ids"][i]
            assert len(positions) == min(20, max(1, round(n * 0.15)))
            assert torch.equal(labels, orig[positions]) and bool((positions[1:] > positions[:-1]).all())
            assert not set(orig[positions].tolist()) & {2, 3}  # never [CLS] / [SEP]
            unchanged = torch.ones(n, dtype=torch.bool)
            unchanged[positions] = False
            assert torch.equal(batch["input_ids"][i, :n][unchanged], orig[:n][unchanged])
            now = batch["input_ids"][i][positions]
            tokens += n
            predicted += len(positions)
            masked += int((now == 4).sum())
            kept += int(((now == labels) & (now != 4)).sum())
            replaced += int(((now != labels) & (now != 4)).sum())
    assert predicted > 40_000  # 3,000 instances of 64-128 tokens
    assert abs(predicted / tokens - 0.15) < 0.01
    assert abs(masked / predicted - 0.8) < 0.01
    assert abs(kept / predicted - 0.1) < 0.01 and abs(replaced / predicted - 0.1) < 0.01


def test_dynamic_masks_are_reproducible_resumable_and_new_each_epoch(dynamic_dir):
    def make(seed=4):
        return ShardLoader(ShardDataset(dynamic_dir, batch_size=50, seed=seed, shuffle_buffer_size=100))

    reference = _take(iter(make()), 70)  # 3,500 instances: into the second epoch (3,000 rows)
    assert all(
        torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(reference, _take(iter(make()), 70), strict=True)
    )
    assert not torch.equal(reference[0]["input_ids"], next(iter(make(seed=5)))["input_ids"])
    loader = make()
    _take(iter(loader), 31)
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(loader.state_dict())))
    for a, b in zip(reference[31:], _take(iter(resumed), 39), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_dynamic_whole_word_masking_takes_whole_words(tmp_path):
    vocab = SPECIAL_TOKENS + [f"w{i}" for i in range(30)] + [f"##s{i}" for i in range(30)]
    path = tmp_path / "wwm"
    write_shard_dir(path, num_shards=1, rows_per_shard=300, vocab=vocab, max_seq_length=64, masking="dynamic")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["config"]["do_whole_word_mask"] = True
    (path / "manifest.json").write_text(json.dumps(manifest))
    ds = ShardDataset(str(path), batch_size=300, shuffle=False, infinite=False)
    raw = ShardDataset.__new__(ShardDataset)
    raw.__dict__.update(ds.__dict__, masking=None)
    batch, original = next(iter(ShardLoader(ds))), next(iter(ShardLoader(raw)))
    is_sub = torch.tensor([t.startswith("##") for t in vocab])
    whole_words_seen = 0
    for i in range(300):
        n = int(batch["attention_mask"][i].sum())
        ids = original["input_ids"][i, :n]
        chosen = set(batch["masked_lm_positions"][i][batch["masked_lm_ids"][i] != -100].tolist())
        for p in range(1, n):  # a ## piece is predicted exactly when the piece it continues is
            if is_sub[ids[p]] and ids[p - 1] not in (2, 3):
                assert (p in chosen) == (p - 1 in chosen), (i, p)
                whole_words_seen += p in chosen
        assert len(chosen) <= min(20, max(1, round(n * 0.15)))
    assert whole_words_seen >= 10  # multi-piece words were predicted (22 with these seeds)


_READ_A_SHARD = """
import sys
from bertprep.bert_model.pretrain.data import _ShardReader
from bertprep.core import storage
from bertprep.core import schema
path = schema.shard_paths(sys.argv[1], storage.read_manifest(sys.argv[1]))[0]
reader = _ShardReader(path, vocab_size=None)
assert reader.num_rows > 0
print("pandas" in sys.modules, "numpy" in sys.modules)
"""


def test_reading_a_shard_as_train_does_imports_no_pandas(tiny_shards):
    """Before: ``to_numpy()`` on the shard columns made pyarrow import pandas (0.4 s and ~50 MB in each of
    ``train``'s loader workers; apache/arrow issue 26926). In a fresh process, as a loader worker starts."""
    done = subprocess.run([sys.executable, "-c", _READ_A_SHARD, str(tiny_shards / "train")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
