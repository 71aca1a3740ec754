"""The settings of ``bertprep train`` (:class:`TrainConfig`): one dataclass, one field per CLI option (the CLI
reads its defaults and help from it), checked in ``__post_init__``. The optimizer's and the loop's settings that
fine-tuning shares are declared once in ``loop_config`` (:class:`OptimConfig`, :class:`LoopConfig`).

Defaults are the paper's (section A.2) and google-research/bert ``run_pretraining.py``; ``trainer.py`` runs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from bertprep.bert_model.loop_config import KEEP_LAST, NSP_LOSS_WEIGHT, KernelConfig, LoopConfig, OptimConfig
from bertprep.bert_model.models.bert_config import ATTN_IMPLEMENTATIONS, PRESETS
from bertprep.bert_model.models.modernbert_config import DROPOUT_FIELDS as MODERNBERT_DROPOUT
from bertprep.bert_model.models.modernbert_config import PRESETS as MODERNBERT_PRESETS
from bertprep.bert_model.pretrain.phases import CONFIG_KEYS, format_phase, parse_phase, parse_phases, size_phases
from bertprep.bert_model.schedules import BATCH_WARMUP_SHAPES

#: ``architecture`` values and the size presets of each (``preset`` names one of its architecture's).
ARCHITECTURE_PRESETS: dict[str, Mapping[str, Any]] = {"bert": PRESETS, "modernbert": MODERNBERT_PRESETS}

#: Tasks ``bertprep train --task`` knows; fine-tuning is its own command (``bertprep finetune``).
TASKS = ("pretrain",)


#: The fields that override the preset's model settings (:meth:`TrainConfig.model_overrides`).
MODEL_OPTIONS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    *MODERNBERT_DROPOUT,
)


#: Fields a resumed run may set afresh without ``allow_resume_changes``: where it reads and writes, how it
#: reports, on what hardware and how fast it runs, and when this invocation stops. Every other field shapes the
#: trained run (:func:`settings_kept_on_resume`).
RUN_CONTROL_FIELDS = frozenset(
    {
        "task",
        "shards",
        "output_dir",
        "eval_shards",
        "eval_every",
        "eval_batches",
        "save_every",
        "keep_last",
        "resume",
        "init_from",
        "compile",
        "compile_mode",
        "kernels",
        "attn_implementation",
        "num_workers",
        "verify_shards",
        "cache_dir",
        "cache_max_gb",
        "max_time_minutes",
        "stop_after_steps",
        "allow_resume_changes",
        "device",
        "precision",
        "log_every",
        "progress",
        "report_to",
    }
)


def settings_kept_on_resume() -> tuple[str, ...]:
    """The :class:`TrainConfig` fields that shape a run besides its model: the optimizer, the learning-rate and
    masking schedules, the batches, the seed and data order (every field but :data:`RUN_CONTROL_FIELDS`, the
    architecture, the preset and :data:`MODEL_OPTIONS`, so a field added later is kept without a change here).
    On ``resume`` one not given is the checkpoint's; one given with another value is refused unless
    ``allow_resume_changes`` (the CLI: ``cli/train.py``)."""
    model = {"architecture", "preset", *MODEL_OPTIONS}
    return tuple(f.name for f in fields(TrainConfig) if f.name not in RUN_CONTROL_FIELDS and f.name not in model)


def same_setting(recorded: Any, value: Any) -> bool:
    """Whether ``recorded``, a setting as a checkpoint's ``state.json`` holds it (JSON: a list where the field
    holds a tuple, such as ``phases``), equals ``value``, the :class:`TrainConfig` field's."""

    def plain(v: Any) -> Any:
        return tuple(v) if isinstance(v, (list, tuple)) else v

    return plain(recorded) == plain(value)


@dataclass
class TrainConfig(LoopConfig, OptimConfig, KernelConfig):
    """Everything ``bertprep train --task pretrain`` takes (CLI options map 1:1 onto these fields, those of
    :class:`LoopConfig`, :class:`OptimConfig` and :class:`KernelConfig` included)."""

    shards: str
    """Training shard directory (``make-shards`` output, with ``manifest.json``)."""
    output_dir: str
    """Run directory: metrics.jsonl, metrics.png, checkpoints/."""
    task: str = "pretrain"
    """What to train: ``pretrain`` = masked LM + next-sentence prediction on shards (the only task so far)."""
    eval_shards: str | None = None
    """Held-out shard directory evaluated every ``eval_every`` steps (same vocab and max_seq_length)."""
    architecture: str = "bert"
    """``bert``: masked LM + next-sentence prediction (Devlin et al. 2018). ``modernbert``: ModernBERT (Warner et
    al. 2024: RoPE, GeGLU, alternating global / local attention), masked LM alone with sparse prediction; NSP /
    SOP shards serve it too, their next_sentence_label ignored. Resuming (or starting from a bertprep checkpoint
    or a Hugging Face directory) takes the model's architecture."""
    preset: str = "base"
    """Model size, one of the architecture's presets: BERT's ``PRESETS`` (tiny, mini, small, medium, base,
    large) or ModernBERT's (tiny, mini, small, base, large; ``modernbert_config.PRESETS``)."""
    num_hidden_layers: int | None = None
    """Override of the preset's number of layers."""
    hidden_size: int | None = None
    """Override of the preset's hidden size (intermediate size follows as 4H unless given)."""
    num_attention_heads: int | None = None
    """Override of the preset's attention heads (must divide the hidden size)."""
    intermediate_size: int | None = None
    """Override of the feed-forward width (default 4 x hidden size)."""
    hidden_dropout_prob: float | None = None
    """Dropout on embeddings and sub-layer outputs (preset: 0.1; with --model it replaces the checkpoint's)."""
    attention_probs_dropout_prob: float | None = None
    """Dropout on attention probabilities (preset: 0.1; with --model it replaces the checkpoint's). ModernBERT: its
    attention_dropout (probabilities and attention output) unless that is given."""
    embedding_dropout: float | None = None
    """ModernBERT only (transformers' ``ModernBertConfig`` name): dropout after the embedding LayerNorm (preset:
    0; default: hidden_dropout_prob's value when that is given)."""
    mlp_dropout: float | None = None
    """ModernBERT only (``ModernBertConfig``): dropout in the GeGLU feed-forward (preset: 0; default:
    hidden_dropout_prob's value when that is given)."""
    attention_dropout: float | None = None
    """ModernBERT only (``ModernBertConfig``): dropout on the attention probabilities and, unless
    attention_output_dropout is given, on the attention output (preset: 0; default: attention_probs_dropout_prob's
    value when that is given)."""
    attention_output_dropout: float | None = None
    """ModernBERT only: dropout on the attention output (after ``Wo``) apart from attention_dropout, as
    ModernBERT's training code has it (``attn_out_dropout_prob`` of its ``FlexBertConfig``; 0.1 in its
    pre-training); transformers' ``ModernBertConfig`` has one field, attention_dropout, for both."""
    batch_size: int = 32
    """Instances per micro-batch on each rank."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step (once the batch-size warm-up, if any, is over). Derived from
    global_batch_size when that is given."""
    global_batch_size: int | None = None
    """Sequences (or packed rows) per optimizer step over all processes: the gradient accumulation is then
    global_batch_size / (batch_size x processes), so a run has the same batch on 1, 2 or 8 processes; refused
    when that product does not divide it. A phase may give its own (global-batch-size=N)."""
    batch_size_warmup_tokens: int = 0
    """Batch-size warm-up (ModernBERT's, Warner et al. 2024, section 2.2): the global batch grows from
    batch_size_start to the full batch (batch_size x gradient_accumulation_steps x processes) over this many
    tokens (token slots: rows x max_seq_length), in whole micro-batches of every process, in the
    batch_size_warmup_shape; 0 = none. Logged as global_batch_size; the learning-rate schedule counts optimizer
    steps (its warm-up may count tokens: warmup_tokens)."""
    batch_size_warmup_shape: str = "linear"
    """How the batch grows during the batch-size warm-up: ``linear`` (linearly in the tokens trained on, so the
    small batches take more steps) or ``equal-steps`` (ModernBERT's BatchSizeWarmupScheduler: each batch size
    takes the same number of steps; ``schedules.BatchSizeWarmup``)."""
    phases: tuple[str, ...] = ()
    """The phases of the run, in order, one ``KEY=VALUE,...`` string each (empty: one phase of the run's
    settings): its size, steps=N (optimizer steps) or tokens=N (token slots, padding included: 2B, 1.7T, 300M;
    the phase lasts ceil(N / (batch_size x gradient_accumulation_steps x processes x its shards'
    max_seq_length)) steps, logged at the start; the last phase may leave its size out: the rest of max_steps),
    shards=DIR, batch-size=B, gradient-accumulation-steps=A, and for ModernBERT global-rope-theta /
    local-rope-theta (context extension); what a phase leaves out is the run's. E.g. the BERT paper's 90% at 128
    then 512: ``--max-steps 1000000 --phase steps=900000 --phase shards=shards/512,batch-size=8``; ModernBERT's
    context extension: ``--phase tokens=1.7T --phase tokens=250B,shards=shards/8192,global-rope-theta=160000``
    (no --max-steps: the phases' sum). One learning-rate schedule runs over all phases; a resumed run continues
    inside the checkpoint's phase."""
    batch_size_start: int | None = None
    """The global batch (instances, or packed rows) the batch-size warm-up starts from, rounded to whole
    micro-batches per process (at least one)."""
    learning_rate: float = 1e-4
    """Peak learning rate (after warm-up)."""
    warmup_steps: int = 10_000
    """Optimizer steps of linear warm-up from 0, then lr_schedule (by default linear decay to 0 at max_steps;
    paper: 10,000). Unused when warmup_tokens is given."""
    warmup_tokens: int = 0
    """A learning-rate warm-up counted in tokens instead of warmup_steps (ModernBERT's: 3B): the learning rate
    rises linearly in the tokens trained on (token slots, as batch_size_warmup_tokens counts them, at the first
    phase's batch and sequence length) and the warm-up lasts until this many are done; its steps are logged at the
    start. 0 = warmup_steps."""
    max_steps: int = 1_000_000
    """Length of the schedule in optimizer steps (the learning rate reaches 0 there) and when training stops.
    0 with ``phases`` that each give ``steps`` or ``tokens``: the sum of their steps (``bertprep train``'s when
    ``--max-steps`` is left out); with phases, any other value must equal that sum."""
    nsp_loss_weight: float = NSP_LOSS_WEIGHT
    """Weight of the next-sentence loss in the training loss ``mlm_loss + nsp_loss_weight * nsp_loss``
    (paper: 1). 0 trains the masked LM alone, as RoBERTa's "no NSP" (the NSP head is still evaluated). With
    shards of objective ``sop`` the same head learns sentence order; with objective ``none`` the rows have no
    label and the loss is the masked LM's alone whatever this weight."""
    packing: bool = False
    """Micro-batches of a token budget: ``batch_size`` rows of ``max_seq_length`` tokens, each row filled with as
    many whole instances as fit (first-fit in loader order; an instance that fits in no row waits for the next
    micro-batch; positions restart at 0 per instance, attention block-diagonal), instead of ``batch_size``
    instances padded to the longest. A step then holds a variable number of instances (more when they are
    short) and an epoch takes fewer steps; ``max_steps``, the learning-rate schedule and the masking-rate
    schedule still count optimizer steps. The shards stay as they are."""
    masked_lm_prob: float | None = None
    """Dynamic masking rate instead of the shards' (e.g. 0.3, ModernBERT's); shards made with ``--masking
    dynamic`` only. ``max_predictions_per_seq`` scales with it."""
    masked_lm_prob_final: float | None = None
    """End of a linear schedule of the masking rate, from ``masked_lm_prob`` (or the shards') at step 0 to this
    at ``max_steps`` (dynamic shards only)."""
    eval_masked_lm_prob: float | None = None
    """Masking rate of dynamic ``eval_shards`` (default: their manifest's, make-shards' 0.15): fixed for the
    whole run whatever the training rate, so evaluations compare; reported as masked_lm_prob in the eval metrics.
    Static eval shards keep their masks."""
    eval_every: int = 1000
    """Optimizer steps between evaluations on ``eval_shards`` (0 = only at the end)."""
    eval_batches: int = 0
    """Batches per evaluation and process (0 = the whole eval directory)."""
    save_every: int = 1000
    """Steps between checkpoints (0 = only at the end; one is always written on exit)."""
    keep_last: int = KEEP_LAST
    """Checkpoints to keep; older ones are deleted (0 = keep all)."""
    resume: str | None = None
    """Checkpoint directory, or run directory (its latest checkpoint), to continue exactly."""
    init_from: str | None = None
    """Weights that start a new run (new optimizer, schedule and data order): a bertprep checkpoint (or run
    directory), or a Hugging Face BERT directory (``config.json`` + ``model.safetensors`` or
    ``pytorch_model.bin``, + ``vocab.txt``; ``BertModel``, ``BertForMaskedLM`` or ``BertForPreTraining``) or
    ModernBERT directory (``model_type`` ``modernbert``: ``ModernBertModel``, ``ModernBertForMaskedLM``, e.g. a
    ``bertprep export``) for continued, domain-adaptive pre-training (Gururangan et al. 2020). Heads the
    source lacks start as the original initialises them; the shards must be made with the model's
    ``vocab.txt``."""
    compile: bool | None = None
    """Run the model through ``torch.compile`` (inductor: fused element-wise kernels, fewer launches; its mode is
    ``compile_mode``). None = on a CUDA device, off on the CPU (where compiling takes longer than a short run
    saves). A compiled run draws dropout from inductor's own random stream, so with dropout it is not
    step-for-step equal to an eager run of the same seed (the same distribution; with dropout 0 the two agree
    to float rounding)."""
    attn_implementation: str = "auto"
    """The attention kernel (``models/attention.py``): ``auto`` (FlashAttention-2's varlen kernel on a CUDA GPU
    of compute capability 8.0+ with bf16, from the ``flash_attn`` package where installed, else PyTorch's;
    ``sdpa`` elsewhere), ``sdpa`` (dense boolean mask, any device), ``varlen``, ``flash_attention_2`` or
    ``flex_attention`` (a document block mask; no attention dropout)."""
    num_workers: int = 1
    """DataLoader worker processes per process (0 = load in the training process). The shards must number at
    least processes x workers."""
    shuffle_buffer_size: int = 10_000
    """Instances in each loader stream's shuffle buffer."""
    verify_shards: bool = True
    """Check every shard file against the sha256 in its manifest before training (one read of the shards)."""
    cache_dir: str | None = None
    """Folder that keeps the shards read from a bucket (``shards`` or ``eval_shards`` a ``gs://`` or ``s3://``
    URL): each process fetches the shards it reads into it, the next one while the current one trains, and checks
    each against the sha256 in the manifest (``--no-verify`` does not skip this). Several runs and processes may
    share it. Default: ``$XDG_CACHE_HOME/bertprep/shards`` (``~/.cache/bertprep/shards``)."""
    cache_max_gb: float = 20.0
    """Bound of ``cache_dir`` in GB (10^9 bytes): beyond it the shards used least recently are removed (never
    the one a process has just fetched). Give room for two shards per loader process, else shards are fetched
    again."""
    max_time_minutes: float | None = None
    """Stop cleanly (with a checkpoint) after this many minutes of training."""
    stop_after_steps: int | None = None
    """Stop cleanly (with a checkpoint) after this many optimizer steps in this invocation, leaving the
    schedule unchanged (for time-sliced or pre-emptible jobs)."""
    allow_resume_changes: bool = False
    """On ``resume``, train with the settings given even where they differ from the checkpoint's (a longer
    ``max_steps``, another learning rate...); without it such a difference is refused (:func:`settings_kept_on_resume`).
    The model's settings never change on resume."""

    def __post_init__(self) -> None:
        LoopConfig.__post_init__(self)
        OptimConfig.__post_init__(self)
        KernelConfig.__post_init__(self)
        self._check_model_choice()
        for name in ("masked_lm_prob", "masked_lm_prob_final", "eval_masked_lm_prob"):
            value = getattr(self, name)
            if value is not None and not 0.0 < value < 1.0:
                raise ValueError(f"{name} must be in (0, 1), got {value}")
        for name in ("batch_size", "gradient_accumulation_steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_steps < 0 or (self.max_steps == 0 and not self.phases):
            raise ValueError(
                f"max_steps must be positive, got {self.max_steps} (0 only with phases that each give steps or tokens)"
            )
        for name in (
            "warmup_steps",
            "eval_every",
            "eval_batches",
            "save_every",
            "keep_last",
            "num_workers",
            "nsp_loss_weight",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        self._check_batch_size_warmup()
        self._check_batch_settings()
        self.phases = tuple(self.phases)
        parse_phases(self.phases, self.max_steps)  # (ValueError naming the phase)
        if self.max_steps and not self.warmup_tokens and self.warmup_steps > self.max_steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) exceeds max_steps ({self.max_steps})")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.resume and self.init_from:
            raise ValueError("give either resume (continue a run) or init_from (new run from weights), not both")
        if self.attn_implementation not in ATTN_IMPLEMENTATIONS:
            raise ValueError(
                f"attn_implementation must be one of {', '.join(ATTN_IMPLEMENTATIONS)}, "
                f"got {self.attn_implementation!r}"
            )
        if self.max_time_minutes is not None and self.max_time_minutes <= 0:
            raise ValueError(f"max_time_minutes must be positive, got {self.max_time_minutes}")
        if self.cache_max_gb <= 0:
            raise ValueError(f"cache_max_gb must be positive, got {self.cache_max_gb}")
        if self.stop_after_steps is not None and self.stop_after_steps <= 0:
            raise ValueError(f"stop_after_steps must be positive, got {self.stop_after_steps}")

    def _check_model_choice(self) -> None:
        """``ValueError`` for a ``task`` not in :data:`TASKS`, an ``architecture`` not in :data:`ARCHITECTURE_PRESETS`,
        or a ``preset`` that is not one of its architecture's."""
        if self.task not in TASKS:
            raise ValueError(f"task {self.task!r} is not supported; choose one of {', '.join(TASKS)}")
        if self.architecture not in ARCHITECTURE_PRESETS:
            raise ValueError(
                f"unknown architecture {self.architecture!r}; choose one of {', '.join(ARCHITECTURE_PRESETS)}"
            )
        presets = ARCHITECTURE_PRESETS[self.architecture]
        if self.preset not in presets:
            raise ValueError(
                f"preset {self.preset!r} is not one of {self.architecture}'s; choose one of {', '.join(presets)}"
            )

    def _check_batch_size_warmup(self) -> None:
        """``ValueError`` for a batch-size warm-up (``batch_size_warmup_tokens``) that cannot grow: negative, without
        a positive ``batch_size_start``, or with one micro-batch a step and no ``global_batch_size``."""
        if self.batch_size_warmup_tokens < 0:
            raise ValueError(f"batch_size_warmup_tokens must be >= 0, got {self.batch_size_warmup_tokens}")
        if self.batch_size_warmup_tokens and (self.batch_size_start is None or self.batch_size_start <= 0):
            raise ValueError("a batch-size warm-up (batch_size_warmup_tokens) needs a positive batch_size_start")
        if self.batch_size_warmup_tokens and self.gradient_accumulation_steps == 1 and not self.global_batch_size:
            raise ValueError(
                "the batch-size warm-up grows the micro-batches per step up to gradient_accumulation_steps: "
                "give gradient_accumulation_steps > 1"
            )

    def _check_batch_settings(self) -> None:
        """``ValueError`` for a global batch, warm-up in tokens or batch warm-up shape out of range."""
        if self.global_batch_size is not None:
            if self.global_batch_size <= 0:
                raise ValueError(f"global_batch_size must be positive, got {self.global_batch_size}")
            if self.gradient_accumulation_steps != 1:
                raise ValueError(
                    "give global_batch_size (the accumulation follows from it) or gradient_accumulation_steps, not both"
                )
        if self.warmup_tokens < 0:
            raise ValueError(f"warmup_tokens must be >= 0, got {self.warmup_tokens}")
        if self.batch_size_warmup_shape not in BATCH_WARMUP_SHAPES:
            raise ValueError(
                f"batch_size_warmup_shape must be one of {', '.join(BATCH_WARMUP_SHAPES)}, "
                f"got {self.batch_size_warmup_shape!r}"
            )

    def for_world_size(self, world_size: int) -> TrainConfig:
        """These settings with ``gradient_accumulation_steps`` derived, for the run's and each phase's global
        batch (``global_batch_size``, a phase's own or the run's), as ``global / (batch_size x world_size)``;
        itself without a global batch.

        Raises:
            ValueError: ``batch_size x world_size`` does not divide a global batch, or a phase gives both its
                accumulation and a global batch (one line, naming the phase).
        """
        specs = [parse_phase(spec, i + 1) for i, spec in enumerate(self.phases)]
        if self.global_batch_size is None and not any("global_batch_size" in p for p in specs):
            return self
        accumulation = self.gradient_accumulation_steps
        if self.global_batch_size is not None:
            accumulation = _accumulation(self.global_batch_size, self.batch_size, world_size, "the run")
        for i, phase in enumerate(specs):
            global_batch = phase.get("global_batch_size", self.global_batch_size)
            if global_batch is None:
                continue
            if "gradient_accumulation_steps" in phase:
                raise ValueError(
                    f"phase {i + 1} ({self.phases[i]!r}) gives gradient-accumulation-steps with a global batch "
                    f"({global_batch}); leave it out: it follows from the global batch"
                )
            batch = phase.get("batch_size", self.batch_size)
            phase["gradient_accumulation_steps"] = _accumulation(global_batch, batch, world_size, f"phase {i + 1}")
            phase.pop("global_batch_size", None)  # (resolved: the accumulation stands for it)
        return dataclasses.replace(
            self,
            gradient_accumulation_steps=accumulation,
            global_batch_size=None,
            phases=tuple(format_phase(p) for p in specs),
        )

    @property
    def log_interval(self) -> int:
        """Steps between metric lines: ``log_every``, or every step in a run shorter than that (so that a short
        first run reports before its end)."""
        return self.log_every if self.max_steps >= self.log_every else 1

    @property
    def sized(self) -> bool:
        """Whether the run's length and every phase's are known in steps: no phase gives ``tokens`` and
        ``max_steps`` is not 0 (else :meth:`with_phase_steps` makes them so)."""
        return bool(self.max_steps) and not any("tokens" in p for p in parse_phases(self.phases, self.max_steps))

    def with_phase_steps(self, token_slots: Sequence[int | None]) -> TrainConfig:
        """These settings with every phase in ``steps`` and ``max_steps`` their sum (``phases.size_phases``):
        ``token_slots[i]`` is phase ``i``'s full global batch in token slots (None for a phase without
        ``tokens``). Itself when :attr:`sized`.

        Raises:
            ValueError: the phases' steps do not add up to ``max_steps`` (not 0); the message names each phase's.
        """
        if self.sized:
            return self
        phases = size_phases(self.phases, self.max_steps, token_slots)
        resized = dataclasses.replace(
            self, phases=tuple(format_phase(p) for p in phases), max_steps=sum(p["steps"] for p in phases)
        )
        if not self.warmup_tokens and resized.warmup_steps > resized.max_steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) exceeds the phases' {resized.max_steps} steps")
        return resized

    def phase_settings(self) -> list[dict[str, Any]]:
        """The phases, parsed, each with its ``steps`` (``phases.parse_phases``); empty without phases.

        Raises:
            ValueError: a phase is sized in ``tokens``: its steps are known once the run starts
                (:meth:`with_phase_steps`).
        """
        phases = parse_phases(self.phases, self.max_steps)
        if any("tokens" in p for p in phases):
            raise ValueError("a phase sized in tokens has its steps once the run starts: use with_phase_steps first")
        return phases

    def for_phase(self, index: int) -> TrainConfig:
        """These settings with phase ``index``'s shards, batch size and accumulation (itself without phases)."""
        if not self.phases:
            return self
        phase = self.phase_settings()[index]
        return dataclasses.replace(self, **{k: phase[k] for k in CONFIG_KEYS if k in phase})

    def model_overrides(self) -> dict[str, Any]:
        """The model options given (preset overrides); with ``init_from`` only the dropout ones apply."""
        return {n: getattr(self, n) for n in MODEL_OPTIONS if getattr(self, n) is not None}


def _accumulation(global_batch: int, batch_size: int, world_size: int, what: str) -> int:
    """``global_batch / (batch_size x world_size)``; ``ValueError`` naming ``what`` when it is not whole."""
    per_step = batch_size * world_size
    if global_batch % per_step:
        raise ValueError(
            f"{what}'s global batch {global_batch} is not a multiple of batch_size {batch_size} x {world_size} "
            f"process(es) = {per_step}; choose a --batch-size and a number of processes whose product divides it"
        )
    return global_batch // per_step


#: Model options that ``init_from`` takes from the command line rather than from the checkpoint.
DROPOUT_OPTIONS = ("hidden_dropout_prob", "attention_probs_dropout_prob", *MODERNBERT_DROPOUT)


__all__ = [
    "ARCHITECTURE_PRESETS",
    "DROPOUT_OPTIONS",
    "MODEL_OPTIONS",
    "MODERNBERT_DROPOUT",
    "RUN_CONTROL_FIELDS",
    "TASKS",
    "TrainConfig",
    "same_setting",
    "settings_kept_on_resume",
]
