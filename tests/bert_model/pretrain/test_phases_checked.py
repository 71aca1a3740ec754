"""Every phase checked before the first step (``pretrain/phase_checks.py``): a later phase's missing shards or a
RoPE base for BERT stop the run before anything is trained; a fault found after a step (a later phase's shard
that fails its sha256 when the phase begins) is reported after a checkpoint of that step, from which ``resume``
goes on as the uninterrupted run. A plain resume of a run of phases does not warn of changed phases."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch

from bertprep.bert_model.pretrain.trainer import train
from model_factory import tiny_train_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(tiny_shards, out, **overrides):
    return tiny_train_config(tiny_shards / "train", out, **{"max_steps": 5, "log_every": 1, **overrides})


def _trained_lines(out) -> list[dict]:
    path = out / "metrics.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return [x for x in lines if x["split"] == "train"]


def test_a_later_phase_without_shards_stops_the_run_before_the_first_step(tiny_shards, tmp_path):
    missing = tmp_path / "MISSING"
    config = _config(tiny_shards, tmp_path / "run", phases=("steps=3", f"shards={missing}"))
    with pytest.raises(ValueError) as caught:
        train(config)
    message = str(caught.value)
    assert message.startswith(f"phase 2 ('shards={missing}'): ") and "no manifest.json" in message
    assert "nothing was trained" in message
    assert _trained_lines(tmp_path / "run") == [] and not (tmp_path / "run" / "checkpoints").exists()


def test_a_rope_base_in_a_phase_of_bert_is_refused_before_the_first_step(tiny_shards, tmp_path):
    config = _config(tiny_shards, tmp_path / "run", phases=("steps=3", "global-rope-theta=160000"))
    with pytest.raises(ValueError, match=r"phase 2 \('global-rope-theta=160000'\) sets global-rope-theta, "
                       r"but a bert model has no rotary embeddings"):  # fmt: skip
        train(config)
    assert _trained_lines(tmp_path / "run") == []


def test_a_later_phase_with_other_vocab_shards_is_refused_before_the_first_step(tiny_shards, tmp_path):
    from shard_factory import write_shard_dir

    other = tmp_path / "other"
    write_shard_dir(other, vocab_size=80, max_seq_length=32, seed=5)
    with pytest.raises(ValueError, match=r"phase 2 \('shards=.*other'\): shards .*other were made with "
                       r"another vocab"):  # fmt: skip
        train(_config(tiny_shards, tmp_path / "run", phases=("steps=3", f"shards={other}")))
    assert _trained_lines(tmp_path / "run") == []


@pytest.mark.slow  # ~5 s on 2 busy cores: three short runs
def test_a_fault_when_a_phase_begins_is_reported_after_a_checkpoint_and_resume_equals_the_full_run(
    tiny_shards, tmp_path
):
    """Phase 2's shard altered after the start: the fault, when phase 2 begins after step 3, comes with a
    checkpoint of step 3 (before, none: the 3 steps were lost); with the shard restored, --resume trains phase 2
    as the uninterrupted run did (same weights)."""
    later = tmp_path / "long"
    shutil.copytree(tiny_shards / "long", later)
    phases = ("steps=3", f"shards={later},batch-size=4")
    full = train(_config(tiny_shards, tmp_path / "full", phases=phases, save_every=0))
    shard = sorted(later.glob("*.arrow"))[0]
    good = shard.read_bytes()

    import bertprep.bert_model.pretrain.build as build

    real_enter = build.enter_phase

    def damaged_then_enter(run, index):  # (the shard changes under the run, after the check at the start)
        shard.write_bytes(good[:-16] + bytes(16))
        return real_enter(run, index)

    build.enter_phase = damaged_then_enter
    try:
        with pytest.raises(ValueError) as caught:
            train(_config(tiny_shards, tmp_path / "run", phases=phases, save_every=0))
    finally:
        build.enter_phase = real_enter
    assert f"step 3 is checkpointed in {tmp_path / 'run' / 'checkpoints' / 'step-000003'}" in str(caught.value)
    assert f"continue with --resume {tmp_path / 'run'}" in str(caught.value)
    shard.write_bytes(good)
    resumed = train(_config(tiny_shards, tmp_path / "run", phases=phases, save_every=0, resume=str(tmp_path / "run")))
    assert resumed.step == full.step == 5
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow  # ~3 s on 2 busy cores: three short runs
def test_a_plain_resume_of_a_run_of_phases_does_not_warn_of_changed_settings(tiny_shards, tmp_path, caplog):
    """The checkpoint's JSON holds the phases as a list, the config as a tuple: equal, so no warning (before:
    "resuming with different phases than the checkpoint" on every plain resume); a real change still warns."""
    out = tmp_path / "run"
    settings = dict(phases=("steps=1", "steps=2"), max_steps=3)
    train(_config(tiny_shards, out, **settings, stop_after_steps=1))
    with caplog.at_level(logging.WARNING, logger="bertprep.train"):
        train(_config(tiny_shards, out, **settings, resume=str(out)))
    assert not [r for r in caplog.records if "resuming with different" in r.getMessage()]
    shutil.rmtree(out / "checkpoints" / "step-000003")
    with caplog.at_level(logging.WARNING, logger="bertprep.train"):
        train(_config(tiny_shards, out, **settings, resume=str(out), learning_rate=2e-3, allow_resume_changes=True))
    assert [r for r in caplog.records if "resuming with different learning_rate than" in r.getMessage()]
