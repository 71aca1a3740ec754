"""Model FLOPs, achieved FLOP/s and MFU in ``metrics.jsonl`` and the progress line, on every device.

The FLOP count is PaLM's (appendix B) / Megatron's accounting, spelled out here by hand for BERT-Base: 6 N for
the layers' weights, 12 L T H for attention, the MLM head at the masked positions only.
"""

from __future__ import annotations

import json

import pytest
import torch

from bertprep.bert_model.metrics import GPU_BF16_PEAK_FLOPS, GPU_PEAK_FLOPS, gpu_model, gpu_peak_flops, matmul_precision
from bertprep.bert_model.models.bert_config import BertConfig, flops, flops_per_token
from bertprep.bert_model.models.modernbert_config import ModernBertConfig
from bertprep.bert_model.models.modernbert_config import flops as modernbert_flops
from bertprep.bert_model.models.packing import attention_pairs
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
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
    ],
)
def test_the_peak_table_knows_the_data_centre_gpus(name, peak):
    assert gpu_peak_flops(name) == GPU_BF16_PEAK_FLOPS[peak]


def test_the_peak_follows_the_exact_model_and_the_matmul_precision():
    assert gpu_model("NVIDIA H200 NVL") == "H200 NVL" and gpu_model("NVIDIA H200") == "H200 SXM"
    assert gpu_peak_flops("NVIDIA H200 NVL") < gpu_peak_flops("NVIDIA H200")  # NVL: lower clocks and power
    h100 = "NVIDIA H100 80GB HBM3"
    assert gpu_peak_flops(h100, "bf16") == 989e12 and gpu_peak_flops(h100, "tf32") == 494.5e12
    assert gpu_peak_flops(h100, "fp32") == 67e12  # an fp32 run without TF32: no tensor cores
    for name, peaks in GPU_PEAK_FLOPS.items():  # tensor cores: TF32 at half bf16's rate (within the sheets' rounding)
        assert peaks["tf32"] == pytest.approx(peaks["bf16"] / 2, rel=0.02), name
        assert peaks["fp32"] < peaks["tf32"], name


def test_the_matmul_precision_of_a_run():
    cpu = torch.device("cpu")
    assert matmul_precision(cpu, bf16=True) == "bf16" and matmul_precision(cpu, bf16=False) == "fp32"


def test_attention_is_counted_over_each_document_s_own_length():
    sequence_ids = torch.tensor([[0, 0, 1, 1, 1, -1], [0, 0, 0, 0, 0, 0]])  # packed (2 + 3) + padding; one of 6
    assert attention_pairs(sequence_ids).item() == 2**2 + 3**2 + 6**2
    config = BertConfig()
    L, H, T = 12, 768, 128
    packed = flops(config, tokens=T, attention_pairs=2 * 64**2)  # a row holding two documents of 64 tokens
    assert flops_per_token(config, T) * T - packed == pytest.approx(12 * L * H * (T**2 - 2 * 64**2), rel=1e-12)


def test_modernbert_local_layers_count_at_most_the_window():
    config = ModernBertConfig.from_preset("base", vocab_size=50368)
    short, long = modernbert_flops(config, 128, 128**2), modernbert_flops(config, 512, 512**2)
    local = sum(t != "full_attention" for t in config.layer_types)
    h, w = config.hidden_size, config.local_attention + 1
    weights_and_head = modernbert_flops(config, 512, 0) - 0
    assert long - weights_and_head == pytest.approx(
        12 * h * ((len(config.layer_types) - local) * 512**2 + local * 512 * w)
    )
    assert short == pytest.approx(128 * modernbert_flops(config, 1, 128))


def test_an_unknown_gpu_has_no_peak():
    assert gpu_peak_flops("NVIDIA GeForce RTX 4090") is None


def _config(root, out, **overrides) -> TrainConfig:
    return tiny_train_config(root / "train", out, **{"max_steps": 2, "warmup_steps": 1, "log_every": 1, **overrides})


def _train_records(out) -> list[dict]:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x["split"] == "train"]


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_cpu_run_logs_tokens_per_second_and_model_flops_but_no_mfu(tiny_shards, tmp_path):
    train(_config(tiny_shards, tmp_path / "cpu"))
    for record in _train_records(tmp_path / "cpu"):
        assert record["tokens_per_s"] > 0 and "mfu" not in record
        # model FLOP/s = FLOPs per token of the model at this row length and masking rate x real tokens/s
        per_token = record["model_flops_per_s"] / record["tokens_per_s"]
        assert per_token > 6 * 2 * (4 * 32 * 32 + 2 * 32 * 128)  # at least 6 N of the two layers


def test_a_device_with_a_known_peak_logs_mfu(tiny_shards, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "device_peak_flops", lambda device, math: 1e9)  # a 1 GFLOP/s "GPU"
    train(_config(tiny_shards, tmp_path / "gpu"))
    for record in _train_records(tmp_path / "gpu"):
        assert record["mfu"] == pytest.approx(record["model_flops_per_s"] / 1e9)
