"""Phases in one run: consecutive slices of the optimizer steps, each with its own shards, batch and (ModernBERT)
RoPE bases, under one learning-rate schedule.

The BERT paper trains 90% of its steps at 128 tokens and the rest at 512 (Devlin et al. 2018, appendix A.2);
NVIDIA's BERT changes the batch too (64k then 32k sequences); ModernBERT extends the context from 1024 to
8192 tokens with a global RoPE base of 160,000 (Warner et al. 2024, section 2.2). Each is one ``bertprep train``
with one ``--phase`` per phase::

    --max-steps 1000000 --phase steps=900000,shards=shards/128 --phase shards=shards/512,batch-size=8

A phase is ``key=value`` pairs, comma-separated: ``steps`` (optimizer steps of the phase; the last phase may
leave it out and takes the rest of ``max_steps``; the steps add up to ``max_steps``), ``shards``,
``batch-size``, ``gradient-accumulation-steps``, ``global-rope-theta``, ``local-rope-theta`` (ModernBERT's
``config.json`` names); what a phase leaves out is the run's. The learning-rate schedule, the step count and the
optimizer state run on across phases; a checkpoint records its phase, and ``--resume`` continues inside it.
Standard library only.
"""

from __future__ import annotations

#: The keys of a phase and their types (``shards`` a directory).
PHASE_KEYS = {
    "steps": int,
    "shards": str,
    "batch_size": int,
    "gradient_accumulation_steps": int,
    "global_rope_theta": float,
    "local_rope_theta": float,
}
#: The keys of a phase that are ``TrainConfig`` fields (the rest set the model's RoPE bases).
CONFIG_KEYS = ("shards", "batch_size", "gradient_accumulation_steps")


def parse_phase(spec: str, number: int) -> dict:
    """``{key: value}`` of phase ``spec`` (``key=value,...``; keys with dashes or underscores).

    Raises:
        ValueError: an unknown key, a repeated one, a value of the wrong type or not positive, naming phase
            ``number`` (1-based).
    """
    phase: dict = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in PHASE_KEYS:
            raise ValueError(
                f"phase {number} ({spec!r}): {item!r} is not key=value with a key of "
                f"{', '.join(k.replace('_', '-') for k in PHASE_KEYS)}"
            )
        if key in phase:
            raise ValueError(f"phase {number} ({spec!r}) gives {key.replace('_', '-')} twice")
        try:
            phase[key] = PHASE_KEYS[key](value.strip())
        except ValueError:
            raise ValueError(f"phase {number} ({spec!r}): {key.replace('_', '-')}={value} is not a number") from None
        if key != "shards" and phase[key] <= 0:
            raise ValueError(f"phase {number} ({spec!r}): {key.replace('_', '-')} must be positive")
    return phase


def parse_phases(specs: tuple[str, ...] | list[str], max_steps: int) -> list[dict]:
    """The phases of ``specs``, each with its ``steps`` filled in (the last one's from ``max_steps``).

    Raises:
        ValueError: a bad phase (``parse_phase``), a phase other than the last without ``steps``, or steps
            that do not add up to ``max_steps``.
    """
    phases = [parse_phase(spec, i + 1) for i, spec in enumerate(specs)]
    for i, phase in enumerate(phases[:-1]):
        if "steps" not in phase:
            raise ValueError(f"phase {i + 1} ({specs[i]!r}) needs steps=N (only the last phase may leave it out)")
    if phases and "steps" not in phases[-1]:
        phases[-1]["steps"] = max_steps - sum(p["steps"] for p in phases[:-1])
    total = sum(p["steps"] for p in phases)
    if phases and (total != max_steps or phases[-1]["steps"] <= 0):
        raise ValueError(f"the phases' steps add up to {total}, not to max_steps ({max_steps})")
    return phases


def phase_at(phases: list[dict], step: int) -> int:
    """The index of the phase that optimizer step ``step`` (0-based: the next step to take) belongs to; the
    last phase from its end on. 0 without phases."""
    end = 0
    for index, phase in enumerate(phases):
        end += phase["steps"]
        if step < end:
            return index
    return max(0, len(phases) - 1)


def phase_start(phases: list[dict], index: int) -> int:
    """The first step of phase ``index``."""
    return sum(p["steps"] for p in phases[:index])


__all__ = ["CONFIG_KEYS", "PHASE_KEYS", "parse_phase", "parse_phases", "phase_at", "phase_start"]
