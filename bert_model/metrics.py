"""Training metrics: per-window accumulation, MFU, the JSON-lines log and the PNG plot."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import torch

from bertprep.bert_model.loop_config import NSP_LOSS_WEIGHT
from bertprep.bert_model.models.bert import IGNORE_INDEX
from bertprep.bert_model.models.packing import attention_pairs, sequence_ids_from_attention_mask
from bertprep.core import strict_json

logger = logging.getLogger("bertprep")


#: Dense (no sparsity) peak FLOP/s of each GPU by the precision its matrix multiplies run in: ``bf16`` (bf16 /
#: fp16 tensor cores), ``tf32`` (an fp32 run whose matmuls PyTorch lets use TF32 tensor cores,
#: ``torch.backends.cuda.matmul.allow_tf32``) and ``fp32`` (plain fp32, no tensor cores). MFU is measured against
#: the peak of the precision the run uses. The vendor's data sheets give "with sparsity" tensor-core figures,
#: twice these. Sources (NVIDIA data sheets): H100 (SXM5 / PCIe / NVL) and H200 (SXM / NVL) "NVIDIA H100 Tensor
#: Core GPU" and "NVIDIA H200 Tensor Core GPU" (nvidia.com/en-us/data-center/h100/, .../h200/): BF16 1,979 / 1,513
#: / 1,671 TFLOPS sparse, TF32 989 / 756 / 835, FP32 67 / 51 / 60 (H200 SXM as H100 SXM; H200 NVL as H100 NVL);
#: A100 "NVIDIA A100 Tensor Core GPU" data sheet (SXM and PCIe alike): BF16 312 dense, TF32 156, FP32 19.5; L4
#: data sheet: BF16 242 sparse, TF32 120, FP32 30.3; L40S data sheet: BF16 362 dense (733 sparse), TF32 183,
#: FP32 91.6; A10 data sheet: BF16 125 dense, TF32 62.5, FP32 31.2; B200 "NVIDIA HGX B200" / DGX B200 data sheet
#: (8 GPUs: BF16 36 PFLOPS sparse, TF32 18 PFLOPS sparse, FP32 600 TFLOPS), per GPU.
GPU_PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H100 SXM": {"bf16": 989e12, "tf32": 494.5e12, "fp32": 67e12},
    "H100 PCIe": {"bf16": 756e12, "tf32": 378e12, "fp32": 51e12},
    "H100 NVL": {"bf16": 835.5e12, "tf32": 417.5e12, "fp32": 60e12},
    "H200 SXM": {"bf16": 989e12, "tf32": 494.5e12, "fp32": 67e12},
    "H200 NVL": {"bf16": 835.5e12, "tf32": 417.5e12, "fp32": 60e12},
    "B200": {"bf16": 2250e12, "tf32": 1125e12, "fp32": 75e12},
    "A100": {"bf16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
    "L40S": {"bf16": 362e12, "tf32": 183e12, "fp32": 91.6e12},
    "L4": {"bf16": 121e12, "tf32": 60e12, "fp32": 30.3e12},
    "A10": {"bf16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12},
}

#: The dense bf16 peaks alone (what MFU of a bf16 run is measured against).
GPU_BF16_PEAK_FLOPS: dict[str, float] = {name: peaks["bf16"] for name, peaks in GPU_PEAK_FLOPS.items()}

#: ``math`` values of :func:`gpu_peak_flops`.
MATMUL_PRECISIONS = ("bf16", "tf32", "fp32")


def gpu_model(device_name: str) -> str | None:
    """The row of :data:`GPU_PEAK_FLOPS` for ``torch.cuda.get_device_name()`` (e.g. "NVIDIA H100 80GB HBM3" is an
    H100 SXM, "NVIDIA H200 NVL" an H200 NVL, "NVIDIA A100-SXM4-80GB" an A100), None when unknown."""
    words = device_name.replace("-", " ").split()
    for family in ("H100", "H200"):
        if family in words:
            variant = "PCIe" if "PCIe" in words else "NVL" if "NVL" in words else "SXM"
            return f"{family} {variant}" if f"{family} {variant}" in GPU_PEAK_FLOPS else None
    return next((key for key in ("B200", "A100", "L40S", "L4", "A10") if key in words), None)


def gpu_peak_flops(device_name: str, math: str = "bf16") -> float | None:
    """Dense peak in FLOP/s of the GPU called ``device_name`` (see :func:`gpu_model`) for matrix multiplies in
    ``math`` (``bf16``, ``tf32`` or ``fp32``: :data:`GPU_PEAK_FLOPS`), None if the GPU is not in the table."""
    model = gpu_model(device_name)
    return None if model is None else GPU_PEAK_FLOPS[model][math]


def matmul_precision(device, bf16: bool) -> str:
    """The precision a run's matrix multiplies use on ``device``: ``bf16`` under bf16 autocast, else ``tf32`` where
    PyTorch lets fp32 matmuls use TF32 (``torch.backends.cuda.matmul.allow_tf32``, set by
    ``torch.set_float32_matmul_precision("high")``), else ``fp32``."""
    if bf16:
        return "bf16"
    return "tf32" if device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32 else "fp32"


def device_peak_flops(device, math: str = "bf16") -> float | None:
    """Dense peak in FLOP/s of ``device`` (a ``torch.device``) for ``math`` (:func:`matmul_precision`): the GPU's from
    the table, None on a CPU or a GPU not in it (then only tokens/s and the model FLOP rate are reported)."""
    if device.type != "cuda":
        return None
    return gpu_peak_flops(torch.cuda.get_device_name(device), math)


class PretrainingMetrics:
    """Sums over a logging window of micro-batches, kept on the device (no host sync per step).

        ``update`` takes a batch and the model output; ``compute`` all-reduces across DDP ranks (when
        ``process_group`` is initialised) and returns means: ``mlm_loss`` (over masked positions), ``nsp_loss``
        (over sequences), ``loss`` = the optimised ``mlm_loss + nsp_loss_weight * nsp_loss`` (``--nsp-loss-weight``,
        1 = the paper's sum), ``mlm_accuracy`` (over all predicted positions, as the original's
        ``masked_lm_accuracy``), ``nsp_accuracy``, and the counts ``tokens`` (real tokens), ``padded_tokens``,
        ``prediction_slots``, ``sequences``, ``attention_pairs`` (sum of squared document lengths: MFU's attention
    term, ``bert_config.flops``). Batches without ``next_sentence_label`` (shards of objective ``none``)
        add nothing to the NSP sums; with none at all in the window, ``nsp_loss`` and ``nsp_accuracy`` are None
        and ``loss`` is ``mlm_loss``.

        With ``mask_token_id`` given, also ``mlm_accuracy_at_mask``: the accuracy over the predicted positions whose
        input is ``[MASK]`` (80% of them). ``mlm_accuracy`` counts the 10% of positions left unchanged too, which
        a model gets right by copying its input: a model that has learned only to copy and to guess frequent
        words reaches an ``mlm_accuracy`` of ~0.14 while ``mlm_accuracy_at_mask`` stays near the frequency of the
        commonest word (0.064 against 0.053 in ``benchmarks/finetune_results.md``). Only the latter shows that the
        encoder uses the context.
    """

    FIELDS = (
        "mlm_loss_sum",
        "masked",
        "mlm_correct",
        "nsp_loss_sum",
        "sequences",
        "nsp_correct",
        "tokens",
        "padded_tokens",
        "prediction_slots",
        "at_mask",
        "at_mask_correct",
        "nsp_sequences",
        "attention_pairs",
    )

    def __init__(
        self, device: torch.device | str, mask_token_id: int | None = None, nsp_loss_weight: float = NSP_LOSS_WEIGHT
    ):
        self.device = torch.device(device)
        self.mask_token_id = mask_token_id
        self.nsp_loss_weight = nsp_loss_weight
        self.reset()

    def reset(self) -> None:
        self.sums = torch.zeros(len(self.FIELDS), dtype=torch.float64, device=self.device)

    @torch.no_grad()
    def update(self, batch: dict[str, torch.Tensor], output: Any) -> None:
        # The prediction slots: (B, P) of padded BERT rows, or (M,) of a sparse head (ModernBERT, packed rows),
        # whose labels and inputs the output carries (``architectures.PretrainingOutput``).
        labels = getattr(output, "mlm_labels", None)
        if labels is None:
            labels = batch["masked_lm_ids"]
        real = labels != IGNORE_INDEX
        masked = real.sum()
        correct = (output.prediction_logits.argmax(-1) == labels) & real  # (B, P) or (M,)
        mlm_correct = correct.sum()
        inputs = getattr(output, "mlm_inputs", None)
        if inputs is None and "masked_lm_positions" in batch:
            inputs = torch.gather(batch["input_ids"], 1, batch["masked_lm_positions"].long())  # (B, P)
        if self.mask_token_id is not None and inputs is not None:
            at_mask = real & (inputs == self.mask_token_id)
            at_mask_count, at_mask_correct = at_mask.sum().double(), (correct & at_mask).sum().double()
        else:
            at_mask_count = at_mask_correct = torch.zeros((), dtype=torch.float64, device=self.device)
        B, T = batch["input_ids"].shape
        zero = torch.zeros((), dtype=torch.float64, device=self.device)
        sequence_ids = batch.get("sequence_ids")
        if sequence_ids is None:
            sequence_ids = sequence_ids_from_attention_mask(batch["attention_mask"])
        pairs = attention_pairs(sequence_ids).double()  # sum of l^2 over the batch's documents
        if "next_sentence_label" in batch and output.nsp_loss is not None:
            nsp_label = batch["next_sentence_label"]
            nsp_correct = (output.seq_relationship_logits.argmax(-1) == nsp_label).sum().double()
            S = nsp_label.numel()  # B, or the D instances of a packed batch
            nsp_loss_sum, nsp_sequences = output.nsp_loss.detach().double() * S, zero + S
        else:  # objective none: no sentence task
            nsp_correct = nsp_loss_sum = nsp_sequences = zero
        values = torch.stack(
            [
                output.mlm_loss.detach().double() * masked,
                masked.double(),
                mlm_correct.double(),
                nsp_loss_sum,
                torch.tensor(B, dtype=torch.float64, device=self.device),
                nsp_correct,
                batch["attention_mask"].sum().double(),
                torch.tensor(B * T, dtype=torch.float64, device=self.device),
                torch.tensor(labels.numel(), dtype=torch.float64, device=self.device),
                at_mask_count,
                at_mask_correct,
                nsp_sequences,
                pairs,
            ]
        )
        self.sums += values

    def compute(self, extra: dict[str, float] | None = None) -> dict[str, float]:
        """Window means (see the class docstring); ``extra`` values are summed over ranks and returned too."""
        extra = extra or {}
        sums = torch.cat([self.sums, torch.tensor(list(extra.values()), dtype=torch.float64, device=self.device)])
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(sums)
        values = sums.tolist()
        s = dict(zip(self.FIELDS, values, strict=False))  # values run on with the extra sums
        out = {
            "mlm_loss": s["mlm_loss_sum"] / max(s["masked"], 1),
            "nsp_loss": s["nsp_loss_sum"] / s["nsp_sequences"] if s["nsp_sequences"] else None,
            "mlm_accuracy": s["mlm_correct"] / max(s["masked"], 1),
            "nsp_accuracy": s["nsp_correct"] / s["nsp_sequences"] if s["nsp_sequences"] else None,
            "tokens": s["tokens"],
            "masked_fraction": s["masked"] / max(s["tokens"], 1),  # realised masking rate: predicted / real tokens
            "padded_tokens": s["padded_tokens"],
            "prediction_slots": s["prediction_slots"],
            "sequences": s["sequences"],
            "attention_pairs": s["attention_pairs"],
        }
        if self.mask_token_id is not None:
            out["mlm_accuracy_at_mask"] = s["at_mask_correct"] / max(s["at_mask"], 1)
        out["loss"] = out["mlm_loss"] + self.nsp_loss_weight * (out["nsp_loss"] or 0.0)
        out.update(zip(extra, values[len(self.FIELDS) :], strict=True))
        return out


class JsonlWriter:
    """Appends one JSON object per line to ``path`` (flushed each time, so a crash loses nothing written)."""

    def __init__(self, path: str, truncate_after_step: int | None = None):
        self.path = path
        if truncate_after_step is not None and os.path.exists(path):
            # Resuming at step N: entries logged after the checkpoint (by the interrupted run) are dropped.
            kept = [line for line in read_jsonl(path) if line.get("step", 0) <= truncate_after_step]
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(strict_json.dumps(line) + "\n" for line in kept)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (the logger's file, closed by close())

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(strict_json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The records of the JSON-lines file ``path`` (``metrics.jsonl``), one dict a line.

    A last line cut short (no newline, not valid JSON: the process was killed or the disk filled mid-write) is
    skipped with a warning naming the file; ``--resume`` then rewrites the file without it.

    Raises:
        ValueError: any other line is not a JSON object; the message names the file and the line.
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            if number == len(lines) and not line.endswith("\n"):
                logger.warning("%s: skipped its last line, cut short (%d characters, %s)", path, len(line), err)
                continue
            raise ValueError(f"{path}, line {number}: not a JSON record ({err}); the file is damaged") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}, line {number}: not a JSON object; the file is damaged")
        records.append(record)
    return records


def plotting_unavailable() -> str | None:
    """Why ``plot_metrics`` cannot run here (matplotlib not importable), or None when it can. The trainer asks
    before training, so that a missing plotting package is reported at the start, not after hours of work."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        return f"{err.name or 'matplotlib'} is not installed (pip install 'bertprep[train]')"
    return None


def _nan(value: float | None) -> float:
    """A logged figure for plotting: None (e.g. NSP accuracy without a sentence task) as NaN, not drawn."""
    return float("nan") if value is None else value


def plot_metrics(jsonl_path: str, png_path: str) -> None:
    """Plot loss, MLM accuracy, NSP accuracy and learning rate against step (train and eval) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_jsonl(jsonl_path)
    train = [r for r in records if r.get("split") == "train"]
    evals = [r for r in records if r.get("split") == "eval"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    # Fixed margins that fit the panels' titles and tick labels: matplotlib's constrained layout measured every
    # text first and took about 40% of the drawing time, paid at the end of every run.
    fig.subplots_adjust(left=0.065, right=0.985, bottom=0.075, top=0.96, wspace=0.16, hspace=0.3)
    panels = [
        ("loss", "loss (MLM + weight x NSP)"),
        ("mlm_accuracy", "MLM accuracy"),
        ("nsp_accuracy", "NSP accuracy"),
        ("lr", "learning rate"),
    ]
    for ax, (key, title) in zip(axes.flat, panels, strict=True):
        if train:
            ax.plot([r["step"] for r in train], [_nan(r.get(key)) for r in train], label="train", lw=1)
        if evals and key != "lr":
            ax.plot([r["step"] for r in evals], [_nan(r.get(key)) for r in evals], "o-", label="eval", ms=3)
        if key == "loss" and train:
            ax.plot([r["step"] for r in train], [r["mlm_loss"] for r in train], label="train MLM", lw=0.8)
            if any(r.get("nsp_loss") is not None for r in train):  # (objective none: no NSP)
                ax.plot([r["step"] for r in train], [_nan(r.get("nsp_loss")) for r in train], label="train NSP", lw=0.8)
        if key == "mlm_accuracy":  # older runs' lines lack it
            for rows, style, name in ((train, "-", "train"), (evals, "o--", "eval")):
                rows = [r for r in rows if "mlm_accuracy_at_mask" in r]
                if rows:
                    ax.plot(
                        [r["step"] for r in rows],
                        [r["mlm_accuracy_at_mask"] for r in rows],
                        style,
                        label=f"{name} at [MASK]",
                        lw=0.8,
                        ms=3,
                    )
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
