"""The settings that several commands of ``bert_model`` share, declared once as dataclass bases.

* :class:`DeviceConfig`: ``--device`` (every command that runs a model: train, finetune, predict, fill-mask,
  extract-features);
* :class:`LoopConfig`: what a training loop takes besides its data: seed, logging (and where the metrics go),
  precision (train, finetune);
* :class:`OptimConfig`: the optimizer's settings and the learning-rate schedule's shape (train, finetune;
  ``optim.create_optimizer`` and ``optim.create_scheduler`` build them).
* :class:`KernelConfig`: how fast the model's own code runs on the device: fused kernels, ``torch.compile``'s
  mode, the padded vocab (train).

``TrainConfig`` and ``FinetuneConfig`` are both a :class:`LoopConfig` and an :class:`OptimConfig`; each command's CLI
reads its defaults from its own config class (``cli/options.dataclass_default``), so a default is written here
and nowhere else. The fields are keyword-only, so a command's own required fields can come first. The learning
rate and the warm-up and schedule lengths are not here: pre-training and fine-tuning take different ones (paper,
appendix A.2-A.3); the schedule's shape is (``schedules.py``).
Standard library only (the command line reads its defaults without importing torch).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

#: ``--precision`` values (``precision.py``: ``auto`` is bf16 autocast on CUDA, fp32 on the CPU).
PRECISIONS = ("auto", "fp32", "bf16")


def check_precision(precision: str) -> None:
    """Raise ``ValueError`` unless ``precision`` is one of :data:`PRECISIONS`."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


#: Checkpoints a run keeps by default (the newest; ``--keep-last``; ``checkpoint.save_checkpoint``).
KEEP_LAST = 3
#: The weight of the next-sentence loss in the training loss ``mlm_loss + weight * nsp_loss`` (BERT: 1;
#: ``metrics.py``).
NSP_LOSS_WEIGHT = 1.0


def check_finite_fields(config: object) -> None:
    """Raise ``ValueError`` for a float field of the dataclass ``config`` that is infinite or NaN (``1e999``
    reads as ``inf``, which passes a ``> 0`` check: a run would train at ``lr Infinity``)."""
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{f.name} must be a finite number, got {value}")


@dataclass(kw_only=True)
class DeviceConfig:
    """Where a command runs its model."""

    device: str = "auto"
    """``auto`` (CUDA if available, else the CPU), ``cpu``, ``cuda`` or ``cuda:N`` (``runtime.resolve_device``);
    under torchrun each rank of ``bertprep train`` uses ``cuda:LOCAL_RANK``."""


@dataclass(kw_only=True)
class LoopConfig(DeviceConfig):
    """What a training loop takes besides its data and its optimizer."""

    seed: int = 12345
    """Seeds initialisation (the model's or the task head's), dropout and the data order."""
    log_every: int = 50
    """Optimizer steps between metric lines in metrics.jsonl (train: also the progress bar's, or with
    ``--no-progress`` a line on stderr, and a train run of fewer steps logs every step)."""
    precision: str = "auto"
    """``auto`` (bf16 autocast on CUDA, fp32 on CPU), ``fp32`` or ``bf16`` (autocast; on a CPU with AVX512-BF16/AMX
    about 1.6x as fast as fp32; ``precision.py``). Weights and optimizer state stay fp32."""
    progress: bool = True
    """Show a tqdm progress bar (rank 0)."""
    report_to: str = "none"
    """Where the metrics go besides ``metrics.jsonl``: ``none``, ``tensorboard`` (event files in
    ``output_dir/tensorboard/``) or ``wandb`` (a Weights & Biases run; ``WANDB_MODE=offline`` writes it in
    ``output_dir/wandb/``); the scalars are named ``train/<field>`` and ``eval/<field>`` (``reporting.py``)."""

    def __post_init__(self) -> None:
        from bertprep.bert_model.reporting import REPORT_TO

        check_finite_fields(self)
        if self.log_every <= 0:
            raise ValueError(f"log_every must be positive, got {self.log_every}")
        check_precision(self.precision)
        if self.report_to not in REPORT_TO:
            raise ValueError(f"report_to must be one of {', '.join(REPORT_TO)}, got {self.report_to!r}")


#: ``OptimConfig``'s settings of the ``wsd`` schedule's final decay, which no other schedule reads.
WSD_ONLY = ("decay_fraction", "decay_steps", "decay_shape")


@dataclass(kw_only=True)
class OptimConfig:
    """The optimizer and the shape of the learning-rate schedule. The defaults are BERT's: AdamW (Loshchilov &
    Hutter 2019) as BERT trains with it (paper, appendix A.2; google-research/bert ``optimization.py``: beta 0.9 /
    0.999, epsilon 1e-6, weight decay 0.01), linear warm-up then linear decay to 0."""

    optimizer: str = "adamw"
    """``adamw``: torch's AdamW (BERT's). ``stable-adamw``: StableAdamW (Wortsman et al. 2023; ModernBERT's;
    torch-optimi; ``pip install 'bertprep[recipes]'``). ``lamb``: LAMB (You et al. 2020) with the step of apex's
    FusedLAMB as NVIDIA's BERT runs it at 64k batch (both bias corrections, decay inside the trust ratio). All
    take weight_decay, adam_beta1/2 and adam_epsilon; no decay on biases and LayerNorm."""
    weight_decay: float = 0.01
    """Decoupled weight decay, not applied to biases and LayerNorm parameters."""
    adam_beta1: float = 0.9
    """AdamW's beta1, the decay of the running mean of the gradient."""
    adam_beta2: float = 0.999
    """AdamW's beta2, the decay of the running mean of the squared gradient."""
    adam_epsilon: float = 1e-6
    """AdamW's epsilon, added to the denominator (1e-6 as the original)."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this (0 = no clipping)."""
    lr_schedule: str = "linear"
    """After the linear warm-up: ``linear`` (BERT's: linear decay to 0 at the last step, max_steps, counted from
    step 0), ``cosine`` (half a cosine to 0), ``wsd`` (warm-up, stable, decay: constant, then a decay over the last
    decay_fraction of the steps; ModernBERT's trapezoidal schedule), ``constant``, ``polynomial`` (fairseq's
    polynomial_decay, RoBERTa's: (1 - p)^polynomial_power, p from 0 at the end of the warm-up to 1 at max_steps),
    or ``polynomial-from-0`` ((1 - step / max_steps)^polynomial_power, counted from step 0 as linear is; NVIDIA's
    BERT with power 0.5)."""
    decay_fraction: float = 0.1
    """``wsd``: the fraction of the steps (max_steps) the final decay takes, unless decay_steps is given
    (refused with another lr_schedule, which would ignore it)."""
    decay_steps: int | None = None
    """``wsd``: the steps of the final decay, instead of decay_fraction of them (refused with another
    lr_schedule)."""
    decay_shape: str = "1-sqrt"
    """``wsd``: the decay's shape; ``1-sqrt`` is ModernBERT's (1 - sqrt(progress); Hägele et al. 2024), else
    ``linear`` or ``cosine`` (refused with another lr_schedule)."""
    min_lr_ratio: float = 0.0
    """The learning rate the decay ends at, as a fraction of the peak (``linear``, ``cosine``, ``wsd``,
    ``polynomial``: fairseq's end_learning_rate / lr)."""
    polynomial_power: float = 1.0
    """``polynomial`` and ``polynomial-from-0``: the power of the decay (fairseq's --power, NVIDIA's degree; 1 =
    linear)."""

    def adamw_settings(self) -> dict[str, float | tuple[float, float] | str]:
        """The keywords of ``optim.create_optimizer`` these settings give (all but the learning rate)."""
        return {
            "optimizer": self.optimizer,
            "weight_decay": self.weight_decay,
            "betas": (self.adam_beta1, self.adam_beta2),
            "eps": self.adam_epsilon,
        }

    def schedule_settings(self, max_steps: int) -> dict[str, float | int | str]:
        """The keywords of ``optim.create_scheduler`` (and ``schedules.lr_factor``) these settings give for a
        schedule of ``max_steps`` steps, the warm-up aside."""
        from bertprep.bert_model.schedules import resolve_decay_steps

        return {
            "schedule": self.lr_schedule,
            "decay_steps": resolve_decay_steps(max_steps, self.decay_steps, self.decay_fraction),
            "decay_shape_name": self.decay_shape,
            "min_lr_ratio": self.min_lr_ratio,
            "polynomial_power": self.polynomial_power,
        }

    def __post_init__(self) -> None:
        from bertprep.bert_model.schedules import DECAY_SHAPES, LR_SCHEDULES

        for name in ("weight_decay", "max_grad_norm"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        choices = {"optimizer": OPTIMIZER_NAMES, "lr_schedule": LR_SCHEDULES, "decay_shape": DECAY_SHAPES}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        if not 0.0 <= self.decay_fraction <= 1.0:
            raise ValueError(f"decay_fraction must be in [0, 1], got {self.decay_fraction}")
        if self.decay_steps is not None and self.decay_steps < 0:
            raise ValueError(f"decay_steps must be >= 0, got {self.decay_steps}")
        if self.polynomial_power <= 0:
            raise ValueError(f"polynomial_power must be positive, got {self.polynomial_power}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        self._check_wsd_settings()

    def _check_wsd_settings(self) -> None:
        """Refuse a setting of ``wsd``'s final decay (``WSD_ONLY``) changed from its default with another
        schedule, which would ignore it: linear and cosine decay over the whole run, constant never."""
        if self.lr_schedule == "wsd":
            return
        defaults = {f.name: f.default for f in dataclasses.fields(OptimConfig)}
        given = [name for name in WSD_ONLY if getattr(self, name) != defaults[name]]
        if given:
            name = given[0]
            raise ValueError(
                f"{name} {getattr(self, name)} applies to lr_schedule wsd only (the length and shape of its final "
                f"decay); lr_schedule {self.lr_schedule} would ignore it: leave it out, or choose --lr-schedule wsd"
            )


#: ``compile_mode`` values: ``torch.compile``'s ``mode`` argument (PyTorch docs, ``torch.compile``).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(kw_only=True)
class KernelConfig:
    """How fast the model's own code runs on its device. None of these changes what is computed: every path is
    tested against the plain PyTorch one on the CPU (``kernels`` ``torch``, no padding, eager)."""

    kernels: str = "auto"
    """``torch`` (PyTorch's LayerNorm etc.: the reference, every device), ``liger`` (Liger Kernel's fused
    Triton LayerNorm; CUDA only, ``pip install liger-kernel``) or ``auto`` (``liger`` on CUDA where installed,
    else ``torch``)."""
    compile_mode: str = "default"
    """``torch.compile``'s mode when the model is compiled (another mode than ``default`` for a model that is not
    compiled is refused: give ``--compile`` off CUDA): ``default``; ``reduce-overhead`` (CUDA graphs: the
    step replayed without a launch per kernel; pays only where every batch has the same shapes, which packed
    batches of static shards have, and compiles with static shapes then); ``max-autotune`` (searches matmul
    and fusion configurations first: minutes of compilation, with CUDA graphs); ``max-autotune-no-cudagraphs``."""
    pad_vocab_size_multiple: int = 64
    """Round the word-embedding / MLM-decoder rows of a new BERT model up to a multiple of this inside the model
    (``BertConfig.pad_vocab_size_multiple``: 30,522 -> 30,528, as MosaicBERT), for aligned matrix shapes; 1 =
    none. Outputs, checkpoints and exports are those of the unpadded model (the padding rows are never
    predicted nor saved). Applied on every device, so a CPU run and a GPU run make the same model; a resumed
    run keeps its checkpoint's."""

    def __post_init__(self) -> None:
        from bertprep.bert_model.models.bert_config import KERNELS

        if self.kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {', '.join(KERNELS)}, got {self.kernels!r}")
        if self.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {', '.join(COMPILE_MODES)}, got {self.compile_mode!r}")
        self._check_compile_mode()
        if self.pad_vocab_size_multiple < 1:
            raise ValueError(f"pad_vocab_size_multiple must be >= 1, got {self.pad_vocab_size_multiple}")

    def _check_compile_mode(self) -> None:
        """Refuse a ``compile_mode`` other than ``default`` for a model that will not be compiled: a config
        with a ``compile`` field (``TrainConfig``) set False, or left None (compiled on CUDA only) with a
        ``device`` that is not CUDA (``cpu``, or ``auto`` without CUDA)."""
        if self.compile_mode == "default" or not hasattr(self, "compile"):
            return
        compile_ = self.compile
        if compile_ is None:
            import torch

            device = str(getattr(self, "device", "auto"))
            compile_ = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        if not compile_:
            raise ValueError(
                f"compile_mode {self.compile_mode} applies to a compiled model, and this run's is not (compile "
                "is off, or left to the device and not on CUDA): add --compile, or leave --compile-mode out"
            )


#: ``optimizer`` values (``optim.create_optimizer`` builds each).
OPTIMIZER_NAMES = ("adamw", "stable-adamw", "lamb")


__all__ = ["COMPILE_MODES", "OPTIMIZER_NAMES", "DeviceConfig", "KernelConfig", "LoopConfig", "OptimConfig"]
