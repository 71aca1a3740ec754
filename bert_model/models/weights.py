"""State dicts in and out of every model of this wing, one set of rules for BERT and ModernBERT alike.

* tied aliases: a model class lists the state-dict keys that alias another parameter in ``tied_weights_keys``
  (Hugging Face ties the MLM decoder to the word embeddings the same way); both keys appear in
  ``state_dict()``, files hold the target only (:func:`trainable_state_dict`), and loading takes either
  (:func:`load_state_dict_strict`);
* task heads start from a pre-trained model's encoder weights (:func:`load_encoder_weights`: ``bert.*`` or
  ``model.*`` (+ ModernBERT's ``head.*``), the prefix being the encoder's ``base_model_prefix``) or load a
  fine-tuned model's whole state dict (:func:`load_full_weights`).

Every function raises ``ValueError`` naming the keys or shapes that do not match, so that a checkpoint of
another model size or family is refused with a message rather than loaded half.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


def tied_weights_keys(model: nn.Module) -> dict[str, str]:
    """``{alias: target}`` of ``model``'s tied parameters (its class's ``tied_weights_keys``; none by default)."""
    return dict(getattr(model, "tied_weights_keys", {}))


def trainable_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` without the tied aliases: what ``model.safetensors`` holds (as Hugging Face)."""
    aliases = tied_weights_keys(model)
    return {k: v for k, v in model.state_dict().items() if k not in aliases}


def load_state_dict_strict(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load a state dict with or without the tied aliases of ``model``.

    Every other key must match exactly (names and shapes), as ``load_state_dict(strict=True)``; a tied alias
    present in ``state_dict`` must equal the tensor it aliases.

    Raises:
        ValueError: naming the missing / unexpected keys, the mismatched shapes, or an alias that differs.
    """
    state_dict = dict(state_dict)
    aliases = tied_weights_keys(model)
    for alias, target in aliases.items():
        if alias in state_dict:
            if target in state_dict and not torch.equal(state_dict[alias], state_dict[target]):
                raise ValueError(f"{alias} should be tied to {target} but holds different values")
            state_dict.setdefault(target, state_dict.pop(alias))
    own = trainable_state_dict(model)
    missing, unexpected = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise ValueError(f"state dict does not match the model: missing {missing}, unexpected {unexpected}")
    _check_shapes(own, state_dict, state_dict, "the model's", "given")
    result = model.load_state_dict(state_dict, strict=False)
    assert set(result.missing_keys) <= set(aliases) and not result.unexpected_keys, result


def count_parameters(model: nn.Module, exclude: Iterable[nn.Module] = ()) -> int:
    """Number of distinct parameters of ``model`` (tied ones counted once), without those of ``exclude``
    (e.g. the embedding tables)."""
    params = {id(p): p for p in model.parameters()}
    for module in exclude:
        for p in module.parameters():
            params.pop(id(p), None)
    return sum(p.numel() for p in params.values())


def _check_shapes(
    own: dict[str, torch.Tensor], state_dict: dict[str, torch.Tensor], keys: Iterable[str], what: str, source: str
) -> None:
    wrong = [
        f"{k}: model {tuple(own[k].shape)}, {source} {tuple(state_dict[k].shape)}"
        for k in keys
        if k in own and k in state_dict and own[k].shape != state_dict[k].shape
    ]
    if wrong:
        raise ValueError(f"state dict does not match {what} shapes: {'; '.join(wrong[:5])}")


# ----------------------------------------------------------------------------------------------- task heads


def base_model_prefix(model: nn.Module) -> str:
    """The key prefix of a head model's encoder weights: ``bert.`` (BERT) or ``model.`` (ModernBERT)."""
    return getattr(model, "base_model_prefix", "bert") + "."


def encoder_prefix(model: nn.Module) -> str:
    """Alias of :func:`base_model_prefix` (the name the task code uses)."""
    return base_model_prefix(model)


def has_pooler(model: nn.Module) -> bool:
    """Whether the encoder of ``model`` has a pooler with parameters (BERT's sequence classification,
    multiple choice and pre-training models do)."""
    encoder = getattr(model, getattr(model, "base_model_prefix", "bert"))
    return getattr(encoder, "pooler", None) is not None


def check_source_weights(
    own: dict[str, torch.Tensor], state_dict: dict[str, torch.Tensor], wanted: list[str], prefix: str = "bert."
) -> None:
    """Check that a source state dict can start a model whose state dict is ``own``: every encoder parameter
    (``bert.embeddings.*``, ``bert.encoder.*``; ModernBERT's ``model.*``) present, and every key of ``wanted``
    that the source has of the model's shape.

    Raises:
        ValueError: naming the missing keys (not a checkpoint of this family) or the mismatched shapes
            (another model size).
    """
    encoder = ("model.",) if prefix == "model." else ("bert.embeddings.", "bert.encoder.")
    missing = [k for k in own if k.startswith(encoder) and k not in state_dict]
    if missing:
        raise ValueError(
            f"the source weights lack encoder parameters {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}; is it a BERT checkpoint?"
        )
    wrong = [
        f"{k}: model {tuple(own[k].shape)}, source {tuple(state_dict[k].shape)}"
        for k in wanted
        if k in state_dict and own[k].shape != state_dict[k].shape
    ]
    if wrong:
        raise ValueError(f"the source weights have other shapes than this model: {'; '.join(wrong[:3])}")


def load_encoder_weights(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> list[str]:
    """Copy the encoder weights of a pre-training (or any BERT / ModernBERT) state dict into a head model.

    BERT: the ``bert.*`` weights. Every encoder parameter of ``model`` must be present with the same shape,
    except the pooler, which is left freshly initialised when the source has none (e.g. a
    token-classification model). Keys outside ``bert.`` (``cls.*`` pre-training heads, another task's
    ``classifier``) are not used.

    ModernBERT: the ``model.*`` weights, and the prediction head ``head.*`` (dense + GELU + LayerNorm) where
    the source has it (a ``ModernBertForMaskedLM``): ``transformers`` ``from_pretrained`` of a ModernBERT MLM
    checkpoint into any ModernBERT task head loads ``head.*`` too, since the names match. ``decoder.bias`` is
    not used.

    Returns the names of ``model``'s parameters left at their initial values (the new head, maybe the
    pooler). Raises ``ValueError`` naming the missing keys or mismatched shapes (another model size).
    """
    own = model.state_dict()
    prefix = base_model_prefix(model)
    taken = (prefix, "head.") if prefix == "model." else (prefix,)
    wanted = [k for k in own if k.startswith(taken)]
    check_source_weights(own, state_dict, wanted, prefix)
    model.load_state_dict({k: state_dict[k] for k in wanted if k in state_dict}, strict=False)
    return [k for k in own if k not in state_dict or not k.startswith(taken)]


def load_full_weights(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load a head model's complete state dict (encoder and head) strictly.

    Raises ``ValueError`` naming missing / unexpected keys or mismatched shapes (e.g. another label count).
    """
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state_dict)), sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise ValueError(
            f"weights do not match {type(model).__name__}: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    _check_shapes(own, state_dict, state_dict, type(model).__name__ + "'s", "file")
    model.load_state_dict(state_dict, strict=True)


__all__ = [
    "base_model_prefix",
    "check_source_weights",
    "count_parameters",
    "encoder_prefix",
    "has_pooler",
    "load_encoder_weights",
    "load_full_weights",
    "load_state_dict_strict",
    "tied_weights_keys",
    "trainable_state_dict",
]
