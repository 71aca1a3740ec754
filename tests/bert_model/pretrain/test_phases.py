"""Phases sized by tokens (``pretrain/phases.py``, ``schedule_setup.size_phases_in_steps``): the count a phase
reads, its steps from the full global batch in token slots, the run's length, and the errors that name the phase."""

from __future__ import annotations

import pytest

from bertprep.bert_model.pretrain import data_setup, schedule_setup
from bertprep.bert_model.pretrain.distributed import DistInfo
from bertprep.bert_model.pretrain.phases import parse_count, parse_phase, size_phases
from bertprep.bert_model.pretrain.start import Start
from model_factory import tiny_train_config


@pytest.mark.parametrize(
    "text,count",
    [("50000", 50_000), ("300M", 300_000_000), ("2B", 2_000_000_000), ("2b", 2_000_000_000),
     ("1.7T", 1_700_000_000_000), ("250B", 250_000_000_000), ("1_000k", 1_000_000), ("0.5K", 500)],
)  # fmt: skip
def test_a_count_reads_its_suffix_exactly(text, count):
    assert parse_count(text) == count


@pytest.mark.parametrize("text", ["1.5", "1.0000000001K", "2G", "1e9", "B", "-3M", ""])
def test_a_count_that_is_not_a_whole_number_is_refused_naming_the_phase(text):
    with pytest.raises(ValueError, match=r"phase 2 \(.*\): tokens=.* is not a count \(digits, then K, M, B or T"):
        parse_phase(f"tokens={text}", 2)


def test_a_phase_gives_steps_or_tokens_not_both():
    with pytest.raises(ValueError, match=r"phase 1 \('steps=4,tokens=2B'\) gives both steps and tokens; keep one"):
        parse_phase("steps=4,tokens=2B", 1)


def test_tokens_become_steps_rounded_up_and_the_run_is_their_sum():
    """1.7T tokens at 4,608 x 1,024 token slots a step: 360,276.96 -> 360,277 steps; 250B and 50B at the same
    slots: 52,981.9 -> 52,982 and 10,596.4 -> 10,597; max_steps 0: the sum, 423,856."""
    slots = 4608 * 1024
    phases = size_phases(["tokens=1.7T", "tokens=250B,global-rope-theta=160000", "tokens=50B"], 0, [slots] * 3)
    assert [p["steps"] for p in phases] == [360_277, 52_982, 10_597]
    assert sum(p["steps"] for p in phases) == 423_856
    assert 1_700_000_000_000 / slots == pytest.approx(360_276.96, abs=0.01)


def test_steps_and_tokens_mix_and_a_disagreeing_max_steps_is_named():
    assert [p["steps"] for p in size_phases(["tokens=1000", "steps=5"], 9, [256, None])] == [4, 5]
    assert [p["steps"] for p in size_phases(["tokens=1024", "shards=x"], 9, [256, None])] == [4, 5]  # the rest
    with pytest.raises(
        ValueError,
        match=r"the phases come to 9 steps \(phase 1: tokens=1,000 / 256 token slots a step = 4 steps; "
        r"phase 2: steps=5\), not max_steps \(8\); leave --max-steps out",
    ):
        size_phases(["tokens=1000", "steps=5"], 8, [256, None])


def test_a_run_as_long_as_its_phases_needs_every_phase_sized():
    with pytest.raises(ValueError, match=r"phase 2 \('shards=x'\) needs steps=N or tokens=N \(the run's length"):
        size_phases(["tokens=1000", "shards=x"], 0, [256, None])


@pytest.mark.parametrize("world_size", [1, 2])
def test_token_slots_are_batch_accumulation_world_size_and_the_phase_shards_max_seq_length(
    tiny_shards, tmp_path, world_size
):
    """Phase 1 on the run's shards (max_seq_length 32), batch 8 x 2 micro-batches: 512 slots a step per process;
    phase 2 on shards of 48 tokens, batch 4 x 3: 576. 10,000 and 20,000 tokens, rounded up; on 2 processes the
    slots double and the steps halve (rounded up)."""
    second = f"tokens=20000,shards={tiny_shards / 'long'},batch-size=4,gradient-accumulation-steps=3"
    config = tiny_train_config(
        tiny_shards / "train", tmp_path, max_steps=0, gradient_accumulation_steps=2, phases=("tokens=10000", second)
    )
    sized = schedule_setup.size_phases_in_steps(config, DistInfo(world_size=world_size))
    slots = [8 * 2 * 32 * world_size, 4 * 3 * 48 * world_size]
    expected = [-(-10_000 // slots[0]), -(-20_000 // slots[1])]
    assert expected == ([20, 35] if world_size == 1 else [10, 18])
    assert [p["steps"] for p in sized.phase_settings()] == expected
    assert sized.max_steps == sum(expected)
    assert sized.for_phase(1).batch_size == 4 and sized.for_phase(1).shards == str(tiny_shards / "long")


def test_a_resume_whose_phases_come_to_other_steps_is_refused(tiny_shards, tmp_path):
    """A run of phases in tokens resumed on another number of processes would move its phase boundaries and the
    end of its schedule: refused, saying what to resume with (the checkpoint's 20 + 35 steps on 1 process)."""
    phases = ("tokens=10000", "tokens=20000")
    config = tiny_train_config(tiny_shards / "train", tmp_path, max_steps=0, resume=str(tmp_path), phases=phases)
    d = DistInfo(world_size=2)
    sized = schedule_setup.size_phases_in_steps(config, d)
    start = Start(saved={"phase_steps": [40, 79], "world_size": 1})
    with pytest.raises(ValueError, match=r"the phases come to \[20, 40\] steps at world size 2, but the checkpoint's "
                       r"run had \[40, 79\] \(world size 1\): resume with that number of processes"):  # fmt: skip
        schedule_setup.check_phase_steps_on_resume(config, sized, start, d)
    schedule_setup.check_phase_steps_on_resume(config, sized, Start(saved={"phase_steps": [20, 40]}), d)


def test_the_batch_size_warmup_is_the_first_phase_s_and_later_phases_take_their_full_batch(tiny_shards, tmp_path):
    """A warm-up from a global batch of 16 (2 micro-batches of 8) to 24 over 2,048 token slots; phase 2's batch of
    4 x 3 is smaller than that start, and it begins at its full 3 micro-batches a step."""
    config = tiny_train_config(
        tiny_shards / "train", tmp_path, gradient_accumulation_steps=3, batch_size_start=16,
        batch_size_warmup_tokens=2048, max_steps=0, phases=("steps=4", "steps=4,batch-size=4"),
    )  # fmt: skip
    info = data_setup.shard_info(config, config.shards)
    first = schedule_setup.batch_size_warmup(config.for_phase(0), info, DistInfo())
    assert [first.micro_batches(s) for s in range(5)] == [2, 2, 3, 3, 3]
    second = schedule_setup.batch_size_warmup(config.for_phase(1), info, DistInfo(), phase=1)
    assert second.warmup_steps == 0 and second.micro_batches(0) == 3


def test_steps_as_a_share_of_max_steps_scale_with_it_exactly():
    """steps=90%: 900,000 of the paper's 1,000,000 steps, 1 of 2 (rounded down, the rest to the last phase); a
    share is exact (57% of 100 is 57, where 0.57 * 100 in floats is 56.99...)."""
    from bertprep.bert_model.pretrain.phases import every_phase_sized, parse_phases

    assert [p["steps"] for p in parse_phases(["steps=90%", "shards=x"], 1_000_000)] == [900_000, 100_000]
    assert [p["steps"] for p in parse_phases(["steps=90%", "shards=x"], 2)] == [1, 1]
    assert [p["steps"] for p in parse_phases(["steps=57%", "shards=x"], 100)] == [57, 43]
    assert [p["steps"] for p in parse_phases(["steps=12.5%", "steps=87.5%"], 8)] == [1, 7]
    assert not every_phase_sized(["steps=50%", "steps=50%"])  # (a share needs max_steps: not the run's sum)


@pytest.mark.parametrize("text", ["0%", "101%", "-5%", "%", "9O%", "0.9"])
def test_a_share_outside_the_run_is_refused_naming_the_phase(text):
    with pytest.raises(ValueError, match=r"phase 1 \(.*\): steps=.* is not a whole number of steps, or a share of "):
        parse_phase(f"steps={text}", 1)


def test_phases_that_do_not_fit_max_steps_are_named_with_their_sizes():
    """The paper's steps=900000 in a run of 2 steps: the message says which phase gets no step and how each phase
    got its size (before: "the phases' steps add up to 2, not to max_steps (2)")."""
    from bertprep.bert_model.pretrain.phases import parse_phases

    with pytest.raises(ValueError) as caught:
        parse_phases(["steps=900000", "shards=x"], 2)
    assert str(caught.value).startswith(
        "phase 2 gets no step of max_steps (2): phase 1: steps=900,000; phase 2: the rest of max_steps = -899,998 "
        "steps; give the phases fewer steps or more --max-steps, or give them as shares of the run (steps=90%)"
    )
    with pytest.raises(ValueError, match=r"phase 1 gets no step of max_steps \(1\): phase 1: steps=90% = 0 steps; "):
        parse_phases(["steps=90%", "shards=x"], 1)
    with pytest.raises(ValueError, match=r"the phases come to 11 steps \(phase 1: steps=90% = 9 steps; phase 2: "
                       r"steps=20% = 2 steps\), not max_steps \(10\)"):  # fmt: skip
        parse_phases(["steps=90%", "steps=20%"], 10)
    with pytest.raises(ValueError, match=r"phase 1 \('steps=90%'\) is a share of max_steps, which is 0"):
        parse_phases(["steps=90%"], 0)
