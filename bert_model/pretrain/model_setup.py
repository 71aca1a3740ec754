"""The model of a pre-training run: its config (the checkpoint's, a Hugging Face directory's checked against
the shards, or a preset's), the model built and given its starting weights, a phase's RoPE bases, and the model
as trained (attention kernel, ``PretrainingModel``, ``torch.compile``, DDP).

``build.build_run`` calls these in order; ``architectures`` builds the ``nn.Module`` itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.hf.interop import (
    ModelSource,
    check_same_vocab,
    load_pretraining_weights,
    max_sequence_length,
    shards_do_lower_case,
    shards_strip_accents,
)
from bertprep.bert_model.models.attention import configure_attention
from bertprep.bert_model.models.bert_config import BertConfig
from bertprep.bert_model.models.kernels import configure_kernels
from bertprep.bert_model.models.modernbert import GLOBAL, LOCAL
from bertprep.bert_model.precision import uses_bf16
from bertprep.bert_model.pretrain import architectures
from bertprep.bert_model.pretrain.architectures import ModelConfig, PretrainingModel
from bertprep.bert_model.pretrain.distributed import DistInfo
from bertprep.bert_model.pretrain.shard_info import ShardInfo, check_compatible
from bertprep.bert_model.pretrain.start import Start
from bertprep.bert_model.pretrain.train_config import DROPOUT_OPTIONS, TrainConfig
from bertprep.bert_model.runtime import seed_everything
from bertprep.core.pretrained_tokenizer import read_vocab_tokens

logger = logging.getLogger("bertprep.train")


def model_config_for(config: TrainConfig, info: ShardInfo, start: Start, phase: int = 0) -> ModelConfig:
    """The model config (:func:`source_model_config`; ``phase`` the one the run starts in) with, for a new BERT
    run, the word embedding padded to a multiple of ``pad_vocab_size_multiple`` inside the model; a resumed run
    keeps its checkpoint's padding (its optimizer state is the same either way:
    ``checkpoint.optimizer_state_to_flat``)."""
    model_config = source_model_config(config, info, start, phase)
    if isinstance(model_config, BertConfig) and not config.resume:
        model_config = dataclasses.replace(model_config, pad_vocab_size_multiple=config.pad_vocab_size_multiple)
    return model_config


def source_model_config(config: TrainConfig, info: ShardInfo, start: Start, phase: int = 0) -> ModelConfig:
    """The model config: the checkpoint's, else the preset with overrides and the shards' vocab. A resumed run
    must read shards of the checkpoint's ``max_seq_length`` unless it resumes in another phase (``phase``) than
    the checkpoint's: a checkpoint of a phase's last step whose next phase could not begin.

    Raises:
        ValueError: the shards do not fit the model or checkpoint (see ``shard_info.check_compatible``).
    """
    if start.saved is not None:
        saved = start.saved
        same_phase = saved.get("phase", 0) == phase
        model_config = architectures.model_config_from_dict(saved["model_config"])
        overrides = config.model_overrides()
        # Dropout is a training setting, not part of the weights: a new run from a checkpoint may change it
        # (e.g. no dropout when continuing pre-training); an exact resume keeps the checkpoint's.
        dropout = {k: v for k, v in overrides.items() if k in DROPOUT_OPTIONS} if config.init_from else {}
        if dropout:
            model_config = architectures.with_dropout(model_config, dropout)
            logger.info("dropout from the command line, not %s: %s", start.checkpoint, dropout)
        ignored = sorted(set(overrides) - set(dropout))
        if ignored:
            logger.warning("model options %s ignored: the model config comes from %s", ignored, start.checkpoint)
        check_compatible(
            info,
            vocab_sha256=saved["data"]["vocab_sha256"],
            vocab_size=model_config.vocab_size,
            max_seq_length=saved["data"]["max_seq_length"] if config.resume and same_phase else None,
            max_position_embeddings=max_sequence_length(model_config),
            what=f"checkpoint {start.checkpoint}",
        )
        return model_config
    if start.hf_source is not None:
        found = architectures.architecture_of(start.hf_source.config)
        if config.architecture != "bert" and config.architecture != found:  # (bert is the default: not a choice)
            raise ValueError(
                f"--model {config.init_from} is a {found} model (config.json model_type), not "
                f"--architecture {config.architecture}; leave --architecture out (the directory's is used)"
            )
        return hf_model_config(config, info, start.hf_source)
    model_config = architectures.model_config_from_preset(
        config.architecture,
        config.preset,
        vocab_size=info.vocab_size,
        special_token_ids=info.special_token_ids,
        overrides=config.model_overrides(),
    )
    check_compatible(
        info, vocab_size=model_config.vocab_size, max_position_embeddings=model_config.max_position_embeddings
    )
    return model_config


def _check_same_text_setting(shard_dir: str, source, name: str, shards_value: bool | None) -> None:
    """Raise ``ValueError`` (saying which make-shards option to give) when the shards were made with the text
    setting ``name`` (``do_lower_case``, ``strip_accents``) other than the model ``source`` was trained with;
    None on either side: not recorded, nothing to check."""
    trained = getattr(source, name)
    if trained is not None and shards_value is not None and shards_value != trained:
        option = "--" + ("" if trained else "no-") + name.replace("_", "-")
        raise ValueError(
            f"shards {shard_dir} were made with {name}={shards_value} but {source.path} "
            f"was trained with {name}={trained}; make the shards with {option}"
        )


def hf_model_config(config: TrainConfig, info: ShardInfo, source: ModelSource) -> ModelConfig:
    """The model config of a run started from a Hugging Face directory (``init_from``): the directory's
    ``config.json`` (BERT or ModernBERT: the directory's architecture is the run's) with the dropout options of
    the command line; the shards must use the model's vocab token for token and its casing. Raises
    ``ValueError`` naming the first differing id (or the casing)."""
    overrides = config.model_overrides()
    dropout = {k: v for k, v in overrides.items() if k in DROPOUT_OPTIONS}
    model_config = architectures.with_dropout(source.config, dropout)
    ignored = sorted(set(overrides) - set(dropout))
    if ignored:
        logger.warning("model options %s ignored: the model config comes from %s", ignored, source.path)
    if info.vocab_file is None:
        raise ValueError(
            f"shards {info.shard_dir} have no vocab file to check against {source.path}'s; "
            "make them again with bertprep make-shards"
        )
    check_same_vocab(read_vocab_tokens(info.vocab_file), source.vocab_tokens, shards=info.shard_dir, model=source.path)
    lower_case, strip_accents = (
        f(info.shard_dir, config.cache_dir) for f in (shards_do_lower_case, shards_strip_accents)
    )
    _check_same_text_setting(info.shard_dir, source, "do_lower_case", lower_case)
    _check_same_text_setting(info.shard_dir, source, "strip_accents", strip_accents)
    if getattr(model_config, "type_vocab_size", 2) == 1 and info.has_sentence_label:
        raise ValueError(
            f"{source.path} has one token type and no next-sentence head (RoBERTa), but shards {info.shard_dir} "
            f"were made for --objective {info.objective}; make them with --objective none"
        )
    check_compatible(
        info,
        vocab_size=model_config.vocab_size,
        max_position_embeddings=max_sequence_length(model_config),
        what=source.path,
    )
    return model_config


def build_model(
    config: TrainConfig, model_config: ModelConfig, start: Start, d: DistInfo, device: torch.device
) -> nn.Module:
    """A seeded model on ``device``, with the weights of ``start`` when it has any."""
    seed_everything(config.seed)
    model = architectures.build_model(model_config)
    if start.checkpoint is not None:
        ckpt.load_model_weights(start.checkpoint, model)
    elif start.hf_source is not None:
        hf_source = start.hf_source
        initialised, unused = load_pretraining_weights(model, hf_source.state_dict)
        if d.is_main:
            logger.info(
                "weights from %s (%s); initialised as in the original (not in the source): %s",
                hf_source.path,
                hf_source.architecture,
                ", ".join(initialised) or "none",
            )
            if unused:
                logger.info("not used from %s: %s", hf_source.path, ", ".join(unused))
    model.to(device)
    return model


def set_rope_theta(model: nn.Module, model_config: ModelConfig, phases: list[dict], index: int) -> None:
    """Give a ModernBERT the RoPE bases phase ``index`` sets (``global_rope_theta``, ``local_rope_theta``), in its
    config (so a checkpoint records them) and in its rotary embeddings; nothing for a phase without them.

    Raises:
        ValueError: a phase sets a RoPE base of a model without rotary embeddings (BERT).
    """
    phase = phases[index] if phases else {}
    thetas = {GLOBAL: phase.get("global_rope_theta"), LOCAL: phase.get("local_rope_theta")}
    if all(v is None for v in thetas.values()):
        return
    rotary = [m.rotary for m in model.modules() if isinstance(getattr(m, "rotary", None), nn.ModuleDict)]
    if not rotary:
        raise ValueError(f"phase {index + 1} sets a RoPE base, but a {type(model).__name__} has no rotary embeddings")
    for kind, theta in thetas.items():
        if theta is not None:
            rotary[0][kind].theta = theta
            setattr(model_config, "global_rope_theta" if kind == GLOBAL else "local_rope_theta", theta)


def wrap_model(config: TrainConfig, model: nn.Module, d: DistInfo, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """``(train_model, eval_model)``: ``model`` with its attention kernel set (``attn_implementation``), in a
    ``PretrainingModel`` (``model(**batch)`` for either architecture and layout), compiled (``compile``; None =
    on CUDA) and, to train, wrapped in DDP. Seeds dropout per rank first."""
    # Dropout differs across ranks; initialisation was the same everywhere (and DDP broadcasts rank 0's).
    torch.manual_seed(config.seed + d.rank)
    kernel = configure_attention(model, config.attn_implementation, device, uses_bf16(device, config.precision))
    kernels = configure_kernels(model, config.kernels, device)
    compiled = compile_enabled(config, device)
    if d.is_main:
        mode = f"on, mode {config.compile_mode}" if compiled else "off"
        logger.info("attention: %s; other kernels: %s; torch.compile: %s", kernel, kernels, mode)
    model = PretrainingModel(model)
    train_model: nn.Module = model
    if compiled:
        train_model = compile_model(model, config.compile_mode)
    if d.enabled:
        train_model = nn.parallel.DistributedDataParallel(
            train_model, device_ids=[device.index] if device.type == "cuda" else None
        )
    eval_model = model if not compiled else compile_model(model, config.compile_mode)
    return train_model, eval_model


def compile_model(model: nn.Module, mode: str, **options: Any) -> nn.Module:
    """``torch.compile(model, mode=mode)``. Shapes change from batch to batch (padding to the longest row, the
    number of prediction slots, the varlen segments), so ``default`` and ``max-autotune-no-cudagraphs`` compile
    dynamic shapes from the start instead of once per new shape; the CUDA-graph modes (``reduce-overhead``,
    ``max-autotune``) record one graph per shape, so they start static (``dynamic=None``: PyTorch marks a size
    dynamic only once it changes), which suits packed batches, whose rows are all ``max_seq_length`` long.
    Python floats are constants of the graph (:func:`with_constant_floats`). ``options``: more keywords of
    ``torch.compile`` (``backend``, ``fullgraph``)."""
    cuda_graphs = mode in ("reduce-overhead", "max-autotune")
    compiled = torch.compile(model, mode=mode, dynamic=None if cuda_graphs else True, **options)
    if isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule):
        compiled.forward = with_constant_floats(compiled.forward)
    return cast(nn.Module, compiled)


def with_constant_floats(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` run with Dynamo's ``specialize_float``: each Python float it meets is a constant of the graph.

    With ``dynamic=True`` (PyTorch 2.13) Dynamo traces every float attribute of torch's own modules
    (``Dropout.p``, ``LayerNorm.eps``, ``Embedding.norm_type``) as a symbolic input, finds them used where only
    a constant fits, and restarts the whole analysis with them constant (``TensorifyScalarRestartAnalysis``):
    the model was traced twice, about 40% of its compile time thrown away (pytorch/pytorch#115711 is about
    those attributes). None of them changes during a run (a phase's RoPE base that does compiles its own graph,
    guarded on the value), so constants from the start give the same graph, traced once."""
    return cast(Callable[..., Any], torch._dynamo.config.patch(specialize_float=True)(forward))


def compile_enabled(config: TrainConfig, device: torch.device) -> bool:
    """Whether to ``torch.compile`` the model: ``config.compile``, or on a CUDA device when it is None."""
    return device.type == "cuda" if config.compile is None else config.compile
