"""Phases in one run: consecutive slices of the optimizer steps, each with its own shards, batch and (ModernBERT)
RoPE bases, under one learning-rate schedule.

The BERT paper trains 90% of its steps at 128 tokens and the rest at 512 (Devlin et al. 2018, appendix A.2);
NVIDIA's BERT changes the batch too (64k then 32k sequences); ModernBERT trains 1.7T tokens at 1024, then extends
the context to 8192 tokens with a global RoPE base of 160,000 over 250B and 50B more (Warner et al. 2024, section
2.2). Each is one ``bertprep train`` with one ``--phase`` per phase::

    --max-steps 1000000 --phase steps=900000,shards=shards/128 --phase shards=shards/512,batch-size=8
    --phase tokens=1.7T,shards=shards/1024 --phase tokens=250B,shards=shards/8192,global-rope-theta=160000

A phase is ``key=value`` pairs, comma-separated: its size, ``steps`` (optimizer steps, or a share of
``max_steps``: ``steps=90%``, rounded down, so that ``--max-steps`` scales the phases) or ``tokens`` (token slots,
:func:`parse_count`: ``2B``, ``1.7T``), ``shards``, ``batch-size``, ``gradient-accumulation-steps`` or
``global-batch-size`` (the accumulation derived from it: ``TrainConfig.for_world_size``), ``global-rope-theta``,
``local-rope-theta`` (ModernBERT's ``config.json`` names); what a phase leaves out is the run's. The last phase
may leave its size out and takes the rest of ``max_steps``.

A phase of ``tokens`` lasts ``ceil(tokens / slots)`` optimizer steps, ``slots`` being its full global batch in
token slots: ``batch_size x gradient_accumulation_steps x world size x max_seq_length`` of its shards (their
manifest), padding included, as the batch-size warm-up counts tokens (``schedules.BatchSizeWarmup``). The
steps are known once the world size and the manifests are (:func:`size_phases`, at the start of a run); the
steps of a batch-size warm-up, which hold fewer rows, count as full ones. ``max_steps`` 0 (the CLI's when
``--max-steps`` is left out and every phase is sized) makes the run as long as its phases; any other
``max_steps`` must equal their sum.

The learning-rate schedule, the step count and the optimizer state run on across phases; a checkpoint records
its phase, and ``--resume`` continues inside it. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

#: The suffixes :func:`parse_count` takes (case ignored): thousand, million, billion, trillion.
COUNT_SUFFIXES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def parse_count(text: str) -> int:
    """``text`` as a whole count: digits (``_`` between them allowed), an optional decimal part and an optional
    suffix of :data:`COUNT_SUFFIXES`: ``50000``, ``300M``, ``1.7T`` (1,700,000,000,000), ``2b``.

    Raises:
        ValueError: not such a number, or not a whole count (``1.5``, ``1.0000000001K``).
    """
    digits, scale = text.strip().replace("_", ""), 1
    if digits and digits[-1].upper() in COUNT_SUFFIXES:
        digits, scale = digits[:-1], COUNT_SUFFIXES[digits[-1].upper()]
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", digits):
        raise ValueError(f"{text!r} is not a count")
    value = Decimal(digits) * scale
    if value != value.to_integral_value():
        raise ValueError(f"{text!r} is not a whole count")
    return int(value)


def parse_steps(text: str) -> int | Decimal:
    """A phase's ``steps``: a whole number of optimizer steps, or a share of the run's ``max_steps`` written as a
    percentage (``90%``, ``12.5%``), returned as the exact fraction (``Decimal("0.9")``) that
    :func:`parse_phases` turns into steps.

    Raises:
        ValueError: neither, or a share outside (0%, 100%].
    """
    text = text.strip()
    if text.endswith("%"):
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", text[:-1].strip()):
            raise ValueError(f"{text!r} is not a percentage")
        share = Decimal(text[:-1].strip()) / 100
        if not 0 < share <= 1:
            raise ValueError(f"{text!r} is not a share of the run in (0%, 100%]")
        return share
    return int(text)


#: The keys of a phase and their types (``shards`` a directory).
PHASE_KEYS: dict[str, Callable[[str], Any]] = {
    "steps": parse_steps,
    "tokens": parse_count,
    "shards": str,
    "batch_size": int,
    "gradient_accumulation_steps": int,
    "global_batch_size": int,
    "global_rope_theta": float,
    "local_rope_theta": float,
}
#: The keys of a phase that are ``TrainConfig`` fields (the rest size the phase or set the model's RoPE bases).
CONFIG_KEYS = ("shards", "batch_size", "gradient_accumulation_steps", "global_batch_size")
#: The keys that size a phase; a phase gives one of them at most.
SIZE_KEYS = ("steps", "tokens")


def _option(key: str) -> str:
    return key.replace("_", "-")


def parse_phase(spec: str, number: int) -> dict:
    """``{key: value}`` of phase ``spec`` (``key=value,...``; keys with dashes or underscores).

    Raises:
        ValueError: an unknown key, a repeated one, both ``steps`` and ``tokens``, a value of the wrong type or
            not positive, naming phase ``number`` (1-based).
    """
    phase: dict = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in PHASE_KEYS:
            raise ValueError(
                f"phase {number} ({spec!r}): {item!r} is not key=value with a key of "
                f"{', '.join(_option(k) for k in PHASE_KEYS)}"
            )
        if key in phase:
            raise ValueError(f"phase {number} ({spec!r}) gives {_option(key)} twice")
        try:
            phase[key] = PHASE_KEYS[key](value.strip())
        except ValueError:
            kind = {
                "tokens": "a count (digits, then K, M, B or T: tokens=2B, tokens=1.7T)",
                "steps": "a whole number of steps, or a share of max_steps in percent (steps=90%)",
            }.get(key, "a number")
            raise ValueError(f"phase {number} ({spec!r}): {_option(key)}={value} is not {kind}") from None
        if key != "shards" and phase[key] <= 0:
            raise ValueError(f"phase {number} ({spec!r}): {_option(key)} must be positive")
    if all(k in phase for k in SIZE_KEYS):
        raise ValueError(f"phase {number} ({spec!r}) gives both steps and tokens; keep one")
    return phase


def is_sized(phase: dict) -> bool:
    """Whether ``phase`` (:func:`parse_phase`) gives its size, in ``steps`` or ``tokens``."""
    return any(k in phase for k in SIZE_KEYS)


def is_share(phase: dict) -> bool:
    """Whether ``phase`` (:func:`parse_phase`) gives its steps as a share of ``max_steps`` (``steps=90%``)."""
    return isinstance(phase.get("steps"), Decimal)


def every_phase_sized(specs: Sequence[str]) -> bool:
    """Whether there are phases and each gives its own size, ``steps=N`` or ``tokens=N``, so that the run can be
    as long as their sum (False for a share of ``max_steps``, ``steps=90%``, which needs ``max_steps``, and for a
    phase that does not parse: :func:`parse_phases` names its fault)."""
    try:
        phases = [parse_phase(spec, i + 1) for i, spec in enumerate(specs)]
    except ValueError:
        return False
    return bool(phases) and all(is_sized(p) and not is_share(p) for p in phases)


def _size_of(phase: dict, rest: bool) -> str:
    """How ``phase`` (:func:`parse_phases`'s) got its steps, for a message: ``steps=900,000``, ``steps=90% = 1
    step``, ``tokens=600 / 256 token slots a step = 3 steps``, ``the rest of max_steps = -8 steps``."""
    steps = f"{phase['steps']:,} step{'' if phase['steps'] == 1 else 's'}"
    if rest:
        return f"the rest of max_steps = {steps}"
    if "tokens" in phase:
        return f"tokens={phase['tokens']:,} / {phase['token_slots']:,} token slots a step = {steps}"
    if "share" in phase:
        return f"steps={format((phase['share'] * 100).normalize(), 'f')}% = {steps}"
    return f"steps={phase['steps']:,}"


def _check_sum(phases: list[dict], max_steps: int, rest: bool) -> None:
    """Raise ValueError when ``phases`` (each with its ``steps``; the last the rest of ``max_steps`` when
    ``rest``) do not come to ``max_steps`` (not 0) or a phase has no step; the message names every phase and its
    size, and the fix."""
    total = sum(p["steps"] for p in phases)
    if not phases or not max_steps or (total == max_steps and all(p["steps"] > 0 for p in phases)):
        return
    last = len(phases) - 1
    sizes = "; ".join(f"phase {i + 1}: {_size_of(p, rest and i == last)}" for i, p in enumerate(phases))
    if total != max_steps:
        raise ValueError(
            f"the phases come to {total:,} steps ({sizes}), not max_steps ({max_steps:,}); leave --max-steps out "
            "(max_steps 0) to train for their sum, or size the phases to it (steps=90% is a share of it)"
        )
    empty = next(i for i, p in enumerate(phases) if p["steps"] <= 0)
    raise ValueError(
        f"phase {empty + 1} gets no step of max_steps ({max_steps:,}): {sizes}; give the phases fewer steps or "
        "more --max-steps, or give them as shares of the run (steps=90%), which --max-steps scales"
    )


def _steps_of_shares(phases: list[dict], specs: Sequence[str], max_steps: int) -> None:
    """Give each phase of a share (``steps=90%``) its steps, the share of ``max_steps`` rounded down, keeping
    the share as ``share``.

    Raises:
        ValueError: a share with ``max_steps`` 0 (the run as long as its phases, so nothing to share).
    """
    for i, phase in enumerate(phases):
        if is_share(phase):
            if not max_steps:
                raise ValueError(
                    f"phase {i + 1} ({specs[i]!r}) is a share of max_steps, which is 0 (the run as long as its "
                    "phases): give --max-steps, or the phase's steps=N"
                )
            phase["share"] = phase["steps"]
            phase["steps"] = int(phase["share"] * max_steps)  # (exact: Decimal, rounded down)


def parse_phases(specs: Sequence[str], max_steps: int) -> list[dict]:
    """The phases of ``specs`` with their ``steps`` as far as they are known before the data: a phase's
    own ``steps``; the last phase without a size, the rest of ``max_steps`` when no phase gives ``tokens``.
    A phase of ``tokens`` keeps them until :func:`size_phases` turns them into steps.

    Raises:
        ValueError: a bad phase (:func:`parse_phase`), a phase other than the last without ``steps`` or
            ``tokens``, a last one without either when ``max_steps`` is 0 (the run as long as its phases),
            or (every phase in steps) steps that do not add up to ``max_steps``.
    """
    phases = [parse_phase(spec, i + 1) for i, spec in enumerate(specs)]
    for i, phase in enumerate(phases):
        if not is_sized(phase) and (i < len(phases) - 1 or max_steps == 0):
            which = "only the last phase may leave it out" if max_steps else "the run's length is their sum"
            raise ValueError(f"phase {i + 1} ({specs[i]!r}) needs steps=N or tokens=N ({which})")
    _steps_of_shares(phases, specs, max_steps)
    if any("tokens" in p for p in phases):
        return phases
    rest = bool(phases) and "steps" not in phases[-1]
    if rest:
        phases[-1]["steps"] = max_steps - sum(p["steps"] for p in phases[:-1])
    _check_sum(phases, max_steps, rest)
    return phases


def size_phases(specs: Sequence[str], max_steps: int, token_slots: Sequence[int | None]) -> list[dict]:
    """The phases of ``specs``, each with its ``steps``: a phase of ``tokens`` lasts
    ``ceil(tokens / token_slots[i])`` optimizer steps (``token_slots[i]``: phase ``i``'s full global batch in
    token slots, padding included; None for a phase without ``tokens``), the last phase without a size the rest
    of ``max_steps``.

    Raises:
        ValueError: what :func:`parse_phases` raises, or steps that do not add up to ``max_steps`` (unless 0:
            the run as long as its phases); the message gives each phase's steps and how they came.
    """
    phases = parse_phases(specs, max_steps)
    if not any("tokens" in p for p in phases):
        return phases
    for phase, slots in zip(phases, token_slots, strict=True):
        if "tokens" in phase:
            assert slots, "a phase of tokens needs its token slots per step"
            phase["steps"] = -(-phase["tokens"] // slots)  # (whole numbers: exact at 10^12)
            phase["token_slots"] = slots
    rest = "steps" not in phases[-1]
    if rest:
        phases[-1]["steps"] = max_steps - sum(p["steps"] for p in phases[:-1])
    _check_sum(phases, max_steps, rest)
    return phases


def format_phase(phase: dict) -> str:
    """Phase ``phase`` (:func:`parse_phase`'s keys) as a ``key=value,...`` spec that :func:`parse_phase` reads
    back to the same phase: sized in ``steps`` when it has them (``tokens`` dropped), else as it was given."""
    size = "steps" if "steps" in phase else "tokens" if "tokens" in phase else None
    items = [f"{size}={phase[size]}"] if size else []
    if is_share(phase):  # a share of max_steps stays one (steps=90%), so that --max-steps still scales it
        items = [f"steps={format((phase['steps'] * 100).normalize(), 'f')}%"]
    items += [f"{_option(k)}={phase[k]}" for k in PHASE_KEYS if k not in SIZE_KEYS and k in phase]
    return ",".join(items)


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


__all__ = [
    "CONFIG_KEYS",
    "COUNT_SUFFIXES",
    "PHASE_KEYS",
    "SIZE_KEYS",
    "every_phase_sized",
    "format_phase",
    "is_share",
    "is_sized",
    "parse_count",
    "parse_phase",
    "parse_phases",
    "parse_steps",
    "phase_at",
    "phase_start",
    "size_phases",
]
