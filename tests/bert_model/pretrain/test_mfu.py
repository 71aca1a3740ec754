"""Model FLOPs, achieved FLOP/s and MFU in ``metrics.jsonl`` and the progress line, on every device.

The FLOP count is PaLM's (appendix B) / Megatron's accounting, spelled out here by hand for BERT-Base: 6 N for
the layers' weights, 12 L T H for attention, the MLM head at the masked positions only.
"""

from __future__ import annotations

import json

import pytest

from bertprep.bert_model.metrics import GPU_BF16_PEAK_FLOPS, gpu_peak_flops
from bertprep.bert_model.models.bert_config import BertConfig, flops_per_token
from bertprep.bert_model.pretrain import build
from bertprep.bert_model.pretrain.trainer import TrainConfig, train
from model_factory import tiny_train_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_bert_base_flops_per_token_are_6n_plus_the_attention_term():
    L, H, FF, T, V = 12, 768, 3072, 128, 30522
    weights = L * (4 * H * H + 2 * H * FF)  # N without embeddings
    attention = 12 * L * T * H  # QK^T and AV, forward + backward
    mlm_head = 6 * (H * H + H * V) * 0.15  # transform + decoder at 15% of the tokens
    assert flops_per_token(BertConfig(), T, 0.15) == pytest.approx(6 * weights + attention + mlm_head, rel=1e-12)
    assert 6 * weights + attention + mlm_head == pytest.approx(545.39e6, rel=1e-4)


@pytest.mark.parametrize(
    "name,peak",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
    ],
)
def test_the_peak_table_knows_the_data_centre_gpus(name, peak):
    assert gpu_peak_flops(name) == GPU_BF16_PEAK_FLOPS[peak]


def test_an_unknown_gpu_has_no_peak():
    assert gpu_peak_flops("NVIDIA GeForce RTX 4090") is None


def _config(root, out, **overrides) -> TrainConfig:
    return tiny_train_config(root / "train", out, **{"max_steps": 2, "warmup_steps": 1, "log_every": 1, **overrides})


def _train_records(out) -> list[dict]:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]


def test_a_cpu_run_logs_tokens_per_second_and_model_flops_but_no_mfu(tiny_shards, tmp_path):
    train(_config(tiny_shards, tmp_path / "cpu"))
    for record in _train_records(tmp_path / "cpu"):
        assert record["tokens_per_s"] > 0 and "mfu" not in record
        # model FLOP/s = FLOPs per token of the model at this row length and masking rate x real tokens/s
        per_token = record["model_flops_per_s"] / record["tokens_per_s"]
        assert per_token > 6 * 2 * (4 * 32 * 32 + 2 * 32 * 128)  # at least 6 N of the two layers


def test_a_device_with_a_known_peak_logs_mfu(tiny_shards, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "device_peak_flops", lambda device: 1e9)  # a 1 GFLOP/s "GPU"
    train(_config(tiny_shards, tmp_path / "gpu"))
    for record in _train_records(tmp_path / "gpu"):
        assert record["mfu"] == pytest.approx(record["model_flops_per_s"] / 1e9)
