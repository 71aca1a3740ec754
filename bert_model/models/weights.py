"""State dicts in and out of every model of this wing, one set of rules for BERT and ModernBERT alike.

* tied aliases: a model class lists the state-dict keys that alias another parameter in ``tied_weights_keys``
  (Hugging Face ties the MLM decoder to the word embeddings the same way); both keys appear in
  ``state_dict()``, files hold the target only (:func:`trainable_state_dict`), and loading takes either
  (:func:`load_state_dict_strict`);
* task heads start from a pre-trained model's encoder weights (:func:`load_encoder_weights`: ``bert.*`` or
  ``model.*`` (+ ModernBERT's ``head.*``), the prefix being the encoder's ``base_model_prefix``) or load a
  fine-tuned model's whole state dict (:func:`load_full_weights`).

* row layouts: a parameter kept in another shape than its state-dict names say, for speed (BERT's fused
  ``query``/``key``/``value`` projection, one ``(3H, H)`` matrix; a word embedding padded to a multiple of 64
  rows) declares which rows hold which state-dict entry (:func:`register_row_layout`); ``state_dict()``,
  ``load_state_dict()``, checkpoints' optimizer state (:func:`row_layouts`) and exports then see the
  reference layout only, so files stay interchangeable with the unfused, unpadded model and Hugging Face's.

Every function raises ``ValueError`` naming the keys or shapes that do not match, so that a checkpoint of
another model size or family is refused with a message rather than loaded half.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

#: ``{local parameter name: [(local state-dict name, first row, end row), ...]}``: which rows (dim 0) of a
#: parameter each state-dict entry is; rows outside every range are padding (zero on load, never saved).
RowLayout = dict[str, list[tuple[str, int, int]]]


def register_row_layout(module: nn.Module, layout: RowLayout) -> None:
    """Make ``module``'s state dict show its parameters in the reference layout ``layout`` describes.

    Saving (a ``state_dict`` post-hook) replaces each ``prefix + name`` by its row slices, named as ``layout``
    says; loading (a ``load_state_dict`` pre-hook) concatenates the named slices back, padding rows left to 0.
    Entries missing from a loaded dict are left alone (``strict`` loading names them). Uses PyTorch's public
    ``register_state_dict_post_hook`` / ``register_load_state_dict_pre_hook`` (torch >= 2.5; earlier ones:
    the private ``_register_*`` spellings).
    """
    for name, parts in layout.items():  # on the parameter too: the optimizer's state follows it (row_layouts)
        module.get_parameter(name).row_layout = (name, parts)  # type: ignore[attr-defined]  # a tag of ours

    def save(mod: nn.Module, state_dict: dict, prefix: str, local_metadata: dict) -> None:
        found = [name for name in layout if prefix + name in state_dict]
        if not found:
            return
        pieces = [
            (prefix + key, state_dict[prefix + name][start:stop]) for name in found for key, start, stop in layout[name]
        ]
        pieces.sort(key=lambda piece: _first_row(layout, piece[0][len(prefix) :]))  # query.weight, query.bias, key...
        items = list(state_dict.items())
        first = next(i for i, (k, _) in enumerate(items) if k in {prefix + n for n in found})
        state_dict.clear()  # rebuilt in order: the pieces where the stored parameter was (the reference order)
        replaced = {prefix + n for n in found}
        state_dict.update((k, v) for k, v in items[:first] if k not in replaced)
        state_dict.update(pieces)
        state_dict.update((k, v) for k, v in items[first:] if k not in replaced)

    def load(mod: nn.Module, state_dict: dict, prefix: str, *args) -> None:
        for name, parts in layout.items():
            keys = [prefix + key for key, _, _ in parts]
            if not all(k in state_dict for k in keys):
                continue
            state_dict[prefix + name] = _assemble(mod.get_parameter(name), [state_dict.pop(k) for k in keys], parts)

    post = getattr(module, "register_state_dict_post_hook", None) or module._register_state_dict_hook
    post(save)
    pre = getattr(module, "register_load_state_dict_pre_hook", None)
    if pre is not None:
        pre(load)
    else:  # torch < 2.5: the private hook takes no module argument
        module._register_load_state_dict_pre_hook(lambda *a: load(module, *a))


def _first_row(layout: RowLayout, key: str) -> int:
    return next(start for parts in layout.values() for k, start, _ in parts if k == key)


def _assemble(own: torch.Tensor, pieces: list[torch.Tensor], parts: list[tuple[str, int, int]]) -> torch.Tensor:
    """The full tensor of ``own``'s shape from its row slices (padding rows 0); a piece of another shape is
    returned as given, so that the caller's shape check names it."""
    if any(
        p.shape[1:] != own.shape[1:] or p.shape[0] != stop - start
        for p, (_, start, stop) in zip(pieces, parts, strict=True)
    ):
        return torch.cat(pieces) if len({p.shape[1:] for p in pieces}) == 1 else pieces[0]
    full = pieces[0].new_zeros(own.shape)
    for piece, (_, start, stop) in zip(pieces, parts, strict=True):
        full[start:stop] = piece
    return full


def row_layouts(named_parameters: Iterable[tuple[str, torch.Tensor]]) -> dict[str, list[tuple[str, int, int]]]:
    """``{full parameter name: [(full state-dict name, first row, end row), ...]}`` of the parameters (e.g.
    ``model.named_parameters()``, or an optimizer's ``param_names`` and ``params``) kept in another layout
    (:func:`register_row_layout`); other parameters are absent. The checkpoint's optimizer state uses it to
    save and load in the reference layout."""
    out = {}
    for full, param in named_parameters:
        if hasattr(param, "row_layout"):
            local, parts = param.row_layout
            prefix = full[: len(full) - len(local)]
            out[full] = [(prefix + key, start, stop) for key, start, stop in parts]
    return out


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
    params = {id(p): p.numel() for p in model.parameters()}
    for p in model.parameters():  # padding rows (a padded vocab) are not parameters of the model
        if hasattr(p, "row_layout"):
            params[id(p)] = sum(stop - start for _, start, stop in p.row_layout[1]) * p[0].numel()
    for module in exclude:
        for p in module.parameters():
            params.pop(id(p), None)
    return sum(params.values())


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
    "RowLayout",
    "base_model_prefix",
    "check_source_weights",
    "count_parameters",
    "encoder_prefix",
    "has_pooler",
    "load_encoder_weights",
    "load_full_weights",
    "load_state_dict_strict",
    "register_row_layout",
    "row_layouts",
    "tied_weights_keys",
    "trainable_state_dict",
]
