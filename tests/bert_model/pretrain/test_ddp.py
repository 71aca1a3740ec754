"""DDP on CPU: `torchrun` with 2 processes and the gloo backend keeps the replicas identical."""

from __future__ import annotations

import json

import pytest

from ddp_factory import run_worker
from shard_factory import write_shard_dir

#: A batch-size warm-up: 1 then 2 micro-batches of 4 per process (start 8 = 1 x 4 x 2 processes; 256 token
#: slots per micro-batch over both processes, 512 to warm up: 1 + floor(2 x 256 / 512) = 2 from step 1).
BATCH_WARMUP = {"gradient_accumulation_steps": 2, "batch_size_start": 8, "batch_size_warmup_tokens": 512}


@pytest.mark.slow
@pytest.mark.parametrize("extra", [{}, BATCH_WARMUP], ids=["plain", "batch-size-warmup"])
def test_two_process_gloo_ddp_keeps_replicas_in_sync(tmp_path, extra):
    """Every rank takes the same micro-batches per step, a batch-size warm-up included (a rank taking more would
    wait forever in DDP's all-reduce: the timeout)."""
    write_shard_dir(tmp_path / "shards", num_shards=4, rows_per_shard=30, vocab_size=64, max_seq_length=32)
    out = tmp_path / "run"
    proc = run_worker(tmp_path / "shards", out, extra)
    assert proc.returncode == 0, proc.stderr[-8000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    # Different data and different dropout masks on each rank, yet identical weights: gradients were averaged.
    assert ranks[0]["digest"] == ranks[1]["digest"]
    assert ranks[0]["epoch"] == ranks[1]["epoch"] == 0
    assert not set(ranks[0]["shards"]) & set(ranks[1]["shards"])
    assert sorted(ranks[0]["shards"] + ranks[1]["shards"]) == [0, 1, 2, 3]
    # Rank 0 wrote one checkpoint holding both ranks' data cursors and RNG states.
    state = json.loads((out / "checkpoints" / "step-000004" / "state.json").read_text())
    assert state["world_size"] == 2 and [r["data_cursor"]["rank"] for r in state["ranks"]] == [0, 1]
    assert state["ranks"][0]["rng"]["torch"] != state["ranks"][1]["rng"]["torch"]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [2, 4]  # written by rank 0 only
    if extra:  # the global batch of steps 2 and 4: 2 micro-batches of 4 on each of 2 processes
        assert [x["global_batch_size"] for x in lines] == [16, 16]


# ------------------------------------------------- fast: the collectives leave gloo's threads nothing to free


@pytest.fixture
def gloo_group(tmp_path):
    """A gloo group of one process (a file store): gloo's worker threads run the collectives as with more."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_gloo_collectives_leave_no_tensor_for_gloo_s_thread_to_free(gloo_group, monkeypatch):
    """A synchronous gloo collective returned while gloo's worker thread still held its tensors (30-70% of calls
    here); a tensor dropped then was freed later by that thread, which needs the GIL: at interpreter exit (the
    DDP wrapper keeps those threads alive) that can abort a rank with "terminate called without an active
    exception". The trainer's collectives now return only once every tensor is the caller's alone."""
    import weakref

    import torch
    import torch.distributed as dist

    from bertprep.bert_model.pretrain.distributed import DistInfo, all_gather_objects, all_reduce_released, any_rank

    for i in range(300):
        t = torch.tensor([float(i % 2), 1.0])
        assert all_reduce_released(t).tolist() == [float(i % 2), 1.0]  # (a sum over one rank)
        ref = weakref.ref(t)
        del t
        assert ref() is None, f"call {i}: the tensor outlived its last Python reference (gloo still held it)"

    passed: list[weakref.ref] = []
    all_gather = dist.all_gather

    def spy(outputs, tensor, *args, **kwargs):
        passed.extend(weakref.ref(x) for x in [*outputs, tensor])
        return all_gather(outputs, tensor, *args, **kwargs)

    monkeypatch.setattr(dist, "all_gather", spy)
    for step in range(100):
        assert all_gather_objects({"step": step, "rng": [1, 2]}, 1) == [{"step": step, "rng": [1, 2]}]
        assert passed and all(ref() is None for ref in passed), f"gather {step}: gloo still held a tensor"
        passed.clear()
    assert any_rank((True, False), DistInfo(), torch.device("cpu")) == (True, False)  # (no DDP: no collective)
