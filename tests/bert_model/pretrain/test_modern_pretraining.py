"""`bertprep train --architecture modernbert`, `--packing` and `--masked-lm-prob` (pretrain/architectures.py,
the packed collate and the dynamic masking rate of pretrain/data.py)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from bertprep.bert_model.collate import collate_numpy, collate_packed_numpy
from bertprep.bert_model.models.modernbert import ModernBertForMaskedLM
from bertprep.bert_model.models.packing import TokenBudgetPacker
from bertprep.bert_model.pretrain.architectures import PretrainingModel, build_model, model_config_from_preset
from bertprep.bert_model.pretrain.data import ShardDataset, scaled_max_predictions
from bertprep.bert_model.pretrain.shard_info import read_shard_info
from bertprep.bert_model.pretrain.trainer import TrainConfig, train
from bertprep.cli.main import cli
from model_factory import tiny_train_config
from shard_factory import write_shard_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPECIALS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_shard_dir(root / "static", num_shards=2, rows_per_shard=40, vocab_size=64, max_seq_length=32, seed=1)
    write_shard_dir(
        root / "dynamic", num_shards=2, rows_per_shard=40, vocab_size=64, max_seq_length=32, seed=2, masking="dynamic"
    )
    write_shard_dir(
        root / "eval", num_shards=1, rows_per_shard=16, vocab_size=64, max_seq_length=32, seed=3, masking="dynamic"
    )
    return root


def _config(root, out, **overrides) -> TrainConfig:
    values = dict(architecture="modernbert", num_hidden_layers=4, verify_shards=False)
    return tiny_train_config(root / "dynamic", out, **{**values, **overrides})


def _rows(shard_dir, n=8):
    ds = ShardDataset(str(shard_dir), batch_size=n, shuffle=False, infinite=False)
    rows = []
    st = ds._open_stream(0, ds._fresh_state(0))
    for ref in range(n):
        row = ds._read_row(st, ref)
        rows.append({k: np.asarray(v) if not isinstance(v, int) else v for k, v in row.items()})
    return rows


# ---------------------------------------------------------------------------------------------- packing


def test_packed_rows_restart_positions_and_keep_every_target(shards):
    rows = _rows(shards / "static")
    packed = collate_packed_numpy(rows, max_seq_length=64)  # rows of 16..32 tokens
    assert packed["input_ids"].shape[1] == 64 and packed["input_ids"].shape[0] < len(rows)  # several per row
    # Every instance appears once, in order, with positions 0..n-1 and its targets as labels.
    starts = np.argwhere(packed["position_ids"] == 0)
    real_starts = [(b, t) for b, t in starts if packed["sequence_ids"][b, t] >= 0]
    assert len(real_starts) == len(rows)
    T = packed["input_ids"].shape[1]
    np.testing.assert_array_equal(packed["sequence_starts"], [b * T + t for b, t in real_starts])
    for (b, t), row in zip(real_starts, rows, strict=True):
        n = len(row["input_ids"])
        np.testing.assert_array_equal(packed["input_ids"][b, t : t + n], row["input_ids"])
        np.testing.assert_array_equal(packed["position_ids"][b, t : t + n], np.arange(n))
        # The prediction slots (over the rows seen as one stream) hold this instance's targets where it sits.
        slots, ids = packed["masked_lm_positions"][0], packed["masked_lm_ids"][0]
        mine = (slots >= b * T + t) & (slots < b * T + t + n) & (ids != -100)
        np.testing.assert_array_equal(slots[mine] - b * T - t, row["masked_lm_positions"])
        np.testing.assert_array_equal(ids[mine], row["masked_lm_ids"])
    # Every target once, in row-major order, and fewer than 8 empty slots (no row padded to the fullest).
    targets = sum(len(r["masked_lm_ids"]) for r in rows)
    assert packed["masked_lm_positions"].shape[0] == 1 and (packed["masked_lm_ids"] != -100).sum() == targets
    assert packed["masked_lm_ids"].shape[1] - targets < 8
    real_slots = packed["masked_lm_positions"][0][packed["masked_lm_ids"][0] != -100]
    assert (np.diff(real_slots) > 0).all()
    # The varlen segments tile the flattened rows: every instance, and every run of padding, is one.
    cu = packed["cu_seqlens"]
    assert cu[0] == 0 and cu[-1] == packed["input_ids"].size and (np.diff(cu) > 0).all()
    padding_runs = sum(
        int(np.any(row < 0)) for row in packed["sequence_ids"]
    )  # (padding is at the end of a row, one run per row that has any)
    assert len(cu) - 1 == len(rows) + padding_runs
    assert packed["attention_mask"].sum() == sum(len(r["input_ids"]) for r in rows)
    np.testing.assert_array_equal(packed["next_sentence_label"], [r["next_sentence_label"] for r in rows])


def _first_fit_layout(rows, num_rows, max_seq_length):
    """The rows of one token-budget step of ``rows`` (all of them), as the loader's packer places them."""
    packer = TokenBudgetPacker(num_rows, max_seq_length)
    assert all(packer.add(i, len(r["input_ids"])) is None for i, r in enumerate(rows))
    (layout,) = packer.flush()
    return layout


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
@pytest.mark.parametrize("first_fit", [False, True])
def test_packed_batch_gives_the_padded_batch_losses(shards, architecture, first_fit):
    rows = _rows(shards / "static")
    config = model_config_from_preset(
        architecture, "tiny", vocab_size=64, special_token_ids=SPECIALS, overrides={"hidden_size": 32}
    )
    torch.manual_seed(0)
    model = PretrainingModel(build_model(config)).eval()
    padded = {k: torch.from_numpy(v) for k, v in collate_numpy(rows).items()}
    # Next-fit in order, or the token-budget packer's first-fit rows (instances out of order: NSP labels follow).
    layout = _first_fit_layout(rows, 5, 48) if first_fit else None  # [[0, 2], [1, 3], [4, 5], [6, 7], []]
    if first_fit:
        assert [i for row in layout for i in row] != list(range(len(rows)))
    packed = collate_packed_numpy(rows, max_seq_length=48 if first_fit else 64, layout=layout)
    packed = {k: torch.from_numpy(v) for k, v in packed.items()}
    with torch.no_grad():
        a, b = model(**padded), model(**packed)
    torch.testing.assert_close(a.mlm_loss, b.mlm_loss, rtol=1e-5, atol=1e-5)
    if architecture == "bert":
        torch.testing.assert_close(a.nsp_loss, b.nsp_loss, rtol=1e-5, atol=1e-5)
    else:  # ModernBERT: no NSP head; the labels are ignored
        assert a.nsp_loss is None and b.nsp_loss is None
    # The same predictions, slot for slot (row-major over the real slots of each layout).
    la, lb = a.mlm_labels[a.mlm_labels != -100], b.mlm_labels[b.mlm_labels != -100]
    if first_fit:  # the same slots, in the packed rows' order
        la, lb = la.sort().values, lb.sort().values
    torch.testing.assert_close(la, lb)


# ------------------------------------------------------------------------------------------ masking rate


def test_dynamic_masking_at_0_3_draws_30_percent_with_80_10_10(shards):
    info = read_shard_info(str(shards / "dynamic"))
    assert scaled_max_predictions(info, 0.3) == 10  # 5 at 0.15 -> 10 at 0.3
    ds = ShardDataset(str(shards / "dynamic"), batch_size=80, shuffle=False, infinite=False, masked_lm_prob=0.3)
    assert ds.masking.max_predictions_per_seq == 10
    masked = tokens = as_mask = kept = 0
    for batch, _ in ds:
        real = batch["masked_lm_ids"] != -100
        tokens += int(batch["attention_mask"].sum())
        masked += int(real.sum())
        inputs = np.take_along_axis(batch["input_ids"], batch["masked_lm_positions"], 1)[real]
        labels = batch["masked_lm_ids"][real]
        as_mask += int((inputs == SPECIALS["[MASK]"]).sum())
        kept += int((inputs == labels).sum())
    # num_to_predict = round(0.3 n) per instance (n with [CLS]/[SEP]), capped at 10 for n <= 32: about 30%.
    assert 0.27 < masked / tokens <= 0.31, masked / tokens
    assert abs(as_mask / masked - 0.8) < 0.06
    assert abs(kept / masked - 0.1) < 0.05  # kept, or replaced by itself (1 / 64)
    assert abs((masked - as_mask - kept) / masked - 0.1) < 0.05


def test_masked_lm_prob_schedule_runs_linearly_to_the_final_rate(shards):
    ds = ShardDataset(
        str(shards / "dynamic"),
        batch_size=4,
        seed=1,
        shuffle_buffer_size=8,
        masked_lm_prob=0.15,
        masked_lm_prob_final=0.45,
        schedule_batches=10,
    )
    rates = []
    for i, (batch, _) in enumerate(ds):
        rates.append((batch["masked_lm_ids"] != -100).sum() / batch["attention_mask"].sum())
        if i == 14:
            break
    assert rates[0] < 0.2 and min(rates[10:]) > 0.35  # after schedule_batches: the final rate


def test_masked_lm_prob_needs_dynamic_shards(shards):
    with pytest.raises(ValueError, match="--masking dynamic"):
        ShardDataset(str(shards / "static"), batch_size=4, masked_lm_prob=0.3)


# ------------------------------------------------------------------------------------------- training


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("architecture", ["modernbert", "bert"])
def test_packed_resume_equals_uninterrupted_run(shards, tmp_path, architecture, caplog):
    common = dict(
        architecture=architecture,
        packing=True,
        masked_lm_prob=0.3,
        masked_lm_prob_final=0.2,
        gradient_accumulation_steps=2,
        eval_shards=str(shards / "eval"),
        eval_every=3,
        eval_batches=1,
        hidden_dropout_prob=0.1,
    )
    if architecture == "bert":
        common.update(num_hidden_layers=2)
    with caplog.at_level(logging.INFO, logger="bertprep.train"):
        full = train(_config(shards, tmp_path / "full", **common))
    first = train(_config(shards, tmp_path / "parts", stop_after_steps=4, **common))
    assert first.step == 4
    second = train(_config(shards, tmp_path / "parts", resume=str(tmp_path / "parts"), **common))
    assert second.step == 8
    a, b = _weights(full.model), _weights(second.model)
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    assert full.data_cursor == second.data_cursor
    init = build_model(full.model.config).state_dict()
    assert any(not torch.equal(init[k], a[k]) for k in a)  # training moved the weights
    lines = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    train_lines = [x for x in lines if x["split"] == "train"]
    eval_lines = [x for x in lines if x["split"] == "eval"]
    assert train_lines[0]["masked_lm_prob"] == pytest.approx(0.3 - 0.1 * 2 / 8)
    assert all(x["masked_lm_prob"] == 0.15 for x in eval_lines)  # fixed: the eval shards' rate
    # The realised rates follow: ~30% of the real tokens predicted at the start of training, ~15% in eval
    # (num_to_predict rounds n * rate per instance of 16..32 tokens).
    assert 0.25 < train_lines[0]["masked_fraction"] < 0.32
    assert all(0.12 < x["masked_fraction"] < 0.18 for x in eval_lines)
    assert 0.5 < train_lines[-1]["real_token_fraction"] <= 1.0  # packed rows: little padding
    if architecture == "modernbert":
        assert isinstance(full.model, ModernBertForMaskedLM)
        assert all(x["nsp_loss"] is None for x in lines)
        assert "next_sentence_label (objective nsp) is ignored" in caplog.text


def test_cli_trains_modernbert_and_refuses_a_preset_of_the_other_table(shards, tmp_path):
    base = ["train", "--shards", str(shards / "dynamic"), "--architecture", "modernbert", "--no-progress"]
    result = CliRunner().invoke(cli, [*base, "--preset", "medium", "-o", str(tmp_path / "a")])
    assert result.exit_code != 0 and "preset 'medium' is not one of modernbert's" in result.output
    args = ["--preset", "tiny", "--hidden-size", "32", "--num-attention-heads", "2", "--batch-size", "4"]
    args += ["--max-steps", "2", "--warmup-steps", "1", "--num-workers", "0", "--packing", "--masked-lm-prob", "0.3"]
    result = CliRunner().invoke(cli, [*base, *args, "-o", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "b" / "checkpoints" / "step-000002" / "config.json").read_text())
    assert config["model_type"] == "modernbert" and config["architectures"] == ["ModernBertForMaskedLM"]
