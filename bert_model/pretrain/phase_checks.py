"""Every phase of a run checked before its first step (``build.build_run``), so that a fault of a later phase
(shards without a manifest, another vocab, rows longer than the model takes, a RoPE base for a model without
rotary embeddings) stops the run before anything is trained rather than after the earlier phases.

What is checked here is what a phase's manifest and keys say; the sha256 of a later phase's shard files is checked
when the phase begins (``build.enter_phase``), and a fault found then is reported after a checkpoint of the last
step (``trainer``).
"""

from __future__ import annotations

from bertprep.bert_model.hf.interop import max_sequence_length
from bertprep.bert_model.pretrain import architectures
from bertprep.bert_model.pretrain.architectures import ModelConfig
from bertprep.bert_model.pretrain.remote_shards import open_shard_info
from bertprep.bert_model.pretrain.shard_info import ShardInfo, check_compatible
from bertprep.bert_model.pretrain.train_config import TrainConfig

#: The phase keys that set a ModernBERT's RoPE bases (``model_setup.set_rope_theta``).
ROPE_KEYS = ("global_rope_theta", "local_rope_theta")


def check_rope_keys(config: TrainConfig, model_config: ModelConfig) -> None:
    """Refuse a phase that sets a RoPE base (``global-rope-theta``, ``local-rope-theta``) for a model without
    rotary embeddings (BERT).

    Raises:
        ValueError: naming the phase and the key.
    """
    if architectures.architecture_of(model_config) == "modernbert":
        return
    for index, phase in enumerate(config.phase_settings()):
        keys = [k.replace("_", "-") for k in ROPE_KEYS if k in phase]
        if keys:
            raise ValueError(
                f"phase {index + 1} ({config.phases[index]!r}) sets {' and '.join(keys)}, but a "
                f"{architectures.architecture_of(model_config)} model has no rotary embeddings (ModernBERT's RoPE): "
                "leave the key out, or train --architecture modernbert"
            )


def check_later_phases(
    config: TrainConfig, current: int, info: ShardInfo, model_config: ModelConfig, cache_max_bytes: int
) -> None:
    """Check the shards of each phase after ``current`` (the phase the run starts or resumes in, whose shards
    ``info`` describes) against the model: a manifest that reads, the same vocab, rows no longer than the model's
    positions. ``config`` has every phase in steps (``TrainConfig.with_phase_steps``).

    Raises:
        ValueError: naming the phase, its shards and the fault (a missing manifest included).
    """
    for index in range(current + 1, len(config.phases)):
        phase = config.for_phase(index)
        try:
            later = open_shard_info(phase.shards, config.cache_dir, cache_max_bytes)
            check_compatible(
                later,
                vocab_sha256=info.vocab_sha256,
                vocab_size=model_config.vocab_size,
                max_position_embeddings=max_sequence_length(model_config),
                what=f"the model (the shards of phase {current + 1}, {info.shard_dir})",
            )
        except (OSError, ValueError) as err:
            raise ValueError(
                f"phase {index + 1} ({config.phases[index]!r}): {err}; nothing was trained (every phase is checked "
                "before the first step)"
            ) from None


__all__ = ["ROPE_KEYS", "check_later_phases", "check_rope_keys"]
