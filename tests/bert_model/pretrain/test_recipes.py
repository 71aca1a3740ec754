"""The recipe options of ``bertprep train``: schedules, optimizers, batch-size warm-up, phases, recipe files."""

from __future__ import annotations

import json

import pytest
import torch

from bertprep.bert_model.pretrain.trainer import TrainConfig, train
from conftest import FIXTURES, need_module
from model_factory import tiny_train_config
from recorded_runs import FIELDS, RUNS, run_records

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(root, out, **overrides) -> TrainConfig:
    """``tiny_train_config`` on ``root/train`` for 9 steps, a metrics line per step."""
    return tiny_train_config(root / "train", out, **{"max_steps": 9, "log_every": 1, **overrides})


def _train_lines(run_dir) -> list[dict]:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if line["split"] == "train"]


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def _assert_same_weights(a, b) -> None:
    a, b = _weights(a), _weights(b)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]


def _resumed_in_pieces(root, out, stops: list[int], **settings):
    """Train to ``max_steps`` in pieces stopping after the steps in ``stops``; the last piece's result."""
    result, done = None, 0
    for stop in [*stops, None]:
        extra = {"stop_after_steps": stop - done} if stop is not None else {}
        result = train(_config(root, out, resume=str(out) if done else None, **settings, **extra))
        done = result.step
    return result


@pytest.mark.parametrize("name", sorted(RUNS))
def test_defaults_train_as_recorded(tiny_shards, tmp_path, name):
    """A run naming none of the recipe options trains as the trainer did before they existed: the per-step
    losses, learning rates and gradient norms of ``tests/fixtures/train/default_runs.json``, recorded then
    (``tests/recorded_runs.py``)."""
    recorded = json.loads((FIXTURES / "train" / "default_runs.json").read_text())[name]
    records = run_records(name, tiny_shards, tmp_path / name)
    assert [r["step"] for r in records] == [r["step"] for r in recorded] == list(range(1, 7))
    for now, then in zip(records, recorded, strict=True):
        for field in FIELDS:
            assert now[field] == pytest.approx(then[field], rel=1e-5, abs=1e-7), (now["step"], field)


@pytest.mark.slow  # ~5 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_wsd_resumed_in_warm_up_stable_and_decay_equals_the_uninterrupted_run(tiny_shards, tmp_path):
    """wsd over 9 steps: warm-up 0-1, stable 2-5, 1-sqrt decay 6-8; stopped after steps 1 (warm-up), 4 (stable)
    and 7 (decay), each time resumed: the same weights and the same learning rate at every step."""
    settings = dict(lr_schedule="wsd", decay_steps=3, gradient_accumulation_steps=2)
    full = train(_config(tiny_shards, tmp_path / "full", **settings))
    pieces = _resumed_in_pieces(tiny_shards, tmp_path / "parts", [1, 4, 7], **settings)
    assert pieces.step == full.step == 9
    _assert_same_weights(full.model, pieces.model)
    lrs = [line["lr"] for line in _train_lines(tmp_path / "full")]
    assert [line["lr"] for line in _train_lines(tmp_path / "parts")] == lrs
    # warm-up 0, 1/2; stable 1 (steps 2-5); decay from step 6: 1 - sqrt(0/3), 1 - sqrt(1/3), 1 - sqrt(2/3)
    expected = [0, 0.5, 1, 1, 1, 1, 1, 1 - (1 / 3) ** 0.5, 1 - (2 / 3) ** 0.5]
    assert lrs == pytest.approx([1e-3 * f for f in expected])


@pytest.mark.parametrize("optimizer,module", [("stable-adamw", "optimi"), ("lamb", "torch")])
def test_optimizer_state_is_checkpointed_and_resumes_exactly(tiny_shards, tmp_path, optimizer, module):
    """--optimizer stable-adamw / lamb (with wsd): stopped after step 4 and resumed, the same weights and losses
    as the uninterrupted run; the checkpoint holds the library's state (optimi's step counter included)."""
    need_module(module)
    settings = dict(optimizer=optimizer, lr_schedule="wsd", decay_fraction=0.3, max_steps=7)
    full = train(_config(tiny_shards, tmp_path / "full", **settings))
    pieces = _resumed_in_pieces(tiny_shards, tmp_path / "parts", [4], **settings)
    assert type(pieces.model) is type(full.model)
    _assert_same_weights(full.model, pieces.model)
    losses = [line["loss"] for line in _train_lines(tmp_path / "full")]
    assert [line["loss"] for line in _train_lines(tmp_path / "parts")] == losses
    state = json.loads((tmp_path / "parts" / "checkpoints" / "step-000004" / "state.json").read_text())
    assert state["train_config"]["optimizer"] == optimizer


def test_batch_size_warmup_is_logged_and_resumes_exactly(tiny_shards, tmp_path):
    """Global batch 8 to 24 (3 micro-batches of 8) over 2048 token slots (256 per micro-batch): 1, 1, 1, 2, 2
    micro-batches, then 3; stopped after step 4, inside the warm-up, and resumed: the same run."""
    settings = dict(gradient_accumulation_steps=3, batch_size_start=8, batch_size_warmup_tokens=2048, max_steps=7)
    full = train(_config(tiny_shards, tmp_path / "full", **settings))
    pieces = _resumed_in_pieces(tiny_shards, tmp_path / "parts", [4], **settings)
    _assert_same_weights(full.model, pieces.model)
    lines = _train_lines(tmp_path / "full")
    assert [line["global_batch_size"] for line in lines] == [8, 8, 8, 16, 16, 24, 24]
    parts = _train_lines(tmp_path / "parts")
    assert [(x["loss"], x["tokens_seen"]) for x in parts] == [(x["loss"], x["tokens_seen"]) for x in lines]
    assert full.data_cursor == pieces.data_cursor


def test_batch_size_warmup_settings_are_checked():
    with pytest.raises(ValueError, match="needs a positive batch_size_start"):
        _config(FIXTURES, "out", gradient_accumulation_steps=2, batch_size_warmup_tokens=100)
    with pytest.raises(ValueError, match="give gradient_accumulation_steps > 1"):
        _config(FIXTURES, "out", batch_size_start=8, batch_size_warmup_tokens=100)


#: The two phases of ``test_phase_2_resumed_equals_the_uninterrupted_run`` sized in steps (the last the rest of
#: max_steps 8), or in tokens with max_steps 0 (the run as long as its phases): 1,000 token slots at 8 x 32 = 256 a
#: step are 4 steps (3.9, rounded up), 1,200 at 4 x 2 x 48 = 384 a step are 4 (3.1).
PHASE_SIZES = {"steps": ("steps=4", "", 8), "tokens": ("tokens=1000", "tokens=1200,", 0)}


@pytest.mark.parametrize("sized_by", sorted(PHASE_SIZES))
@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_phase_2_resumed_equals_the_uninterrupted_run(tiny_shards, tmp_path, architecture, sized_by):
    """Two phases (4 steps of batch 8 at 32 tokens, then 4 of batch 4 x 2 at 48 tokens, given in steps or in
    tokens; ModernBERT's global RoPE base raised in phase 2), stopped at the boundary and inside phase 2 and
    resumed each time: the same run, and the checkpoints know their phase and record the phases as given."""
    first, second, max_steps = PHASE_SIZES[sized_by]
    phases = (first, f"{second}shards={tiny_shards / 'long'},batch-size=4,gradient-accumulation-steps=2")
    if architecture == "modernbert":
        phases = (phases[0] + ",global-rope-theta=10000", phases[1] + ",global-rope-theta=160000")
    settings = dict(architecture=architecture, max_steps=max_steps, phases=phases, save_every=2, keep_last=0)
    full = train(_config(tiny_shards, tmp_path / "full", **settings))
    pieces = _resumed_in_pieces(tiny_shards, tmp_path / "parts", [4, 6], **settings)
    _assert_same_weights(full.model, pieces.model)
    assert [x["loss"] for x in _train_lines(tmp_path / "parts")] == [x["loss"] for x in _train_lines(tmp_path / "full")]
    states = {
        step: json.loads((tmp_path / "full" / "checkpoints" / f"step-00000{step}" / "state.json").read_text())
        for step in (2, 4, 6)
    }
    assert [states[s]["phase"] for s in (2, 4, 6)] == [0, 1, 1]  # step 4 ends phase 1: phase 2 comes next
    assert [states[s]["data"]["max_seq_length"] for s in (2, 4, 6)] == [32, 48, 48]
    assert full.step == pieces.step == 8 and states[6]["phase_steps"] == [4, 4]
    assert states[6]["train_config"]["phases"] == list(phases) and states[6]["train_config"]["max_steps"] == max_steps
    if architecture == "modernbert":
        assert [states[s]["model_config"]["global_rope_theta"] for s in (2, 4)] == [10000, 160000]
        assert full.model.model.rotary["full_attention"].theta == 160000


def test_phases_are_checked_naming_the_phase(tiny_shards, tmp_path):
    with pytest.raises(ValueError, match=r"phase 1 \('steps=4,batch=2'\): 'batch=2' is not key=value with a key of"):
        _config(tiny_shards, tmp_path, phases=("steps=4,batch=2", "steps=5"))
    with pytest.raises(ValueError, match=r"the phases come to 10 steps \(phase 1: steps=4; phase 2: steps=6\), not "
                       r"max_steps \(9\)"):  # fmt: skip
        _config(tiny_shards, tmp_path, phases=("steps=4", "steps=6"))
    with pytest.raises(ValueError, match=r"phase 1 .* needs steps=N"):
        _config(tiny_shards, tmp_path, phases=("batch-size=4", "steps=6"))
