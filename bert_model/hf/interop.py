"""Models in: bertprep checkpoints and Hugging Face BERT directories (export to ``transformers`` is ``export.py``),
and the checks of shards against one (:func:`check_same_vocab`, the shards' casing); the model config of a
pre-training run started from one is ``pretrain/model_setup.hf_model_config``'s (this package imports nothing of
``pretrain/``).

Reading never executes anything from disk: weights come from ``model.safetensors`` (``safetensors``) or
``pytorch_model.bin`` through ``torch.load(weights_only=True)``; configs are JSON. Parameter names need no
conversion (bertprep uses Hugging Face's), except three spellings older BERT checkpoints carry
(``LayerNorm.gamma/beta``, a persisted ``position_ids`` buffer, a bare ``BertModel`` without the ``bert.``
prefix), which ``normalize_hf_state_dict`` maps.

**RoBERTa** (``model_type`` ``roberta`` / ``xlm-roberta``: ``RobertaForMaskedLM``, ``RobertaModel``) arrives as
BERT weights with RoBERTa's embeddings: ``roberta.*`` -> ``bert.*``, ``lm_head.dense`` / ``lm_head.layer_norm`` /
``lm_head.bias`` -> ``cls.predictions.transform.dense`` / ``.transform.LayerNorm`` / ``.bias``
(:data:`ROBERTA_KEYS`), ``BertConfig.position_offset`` = ``pad_token_id + 1`` and one token type; it has no
next-sentence head (shards with ``--objective none``). ``export`` writes it back as ``RobertaForMaskedLM``.

The tokenizer beside the weights: ``vocab.txt`` (BERT), else ``tokenizer.json``: a WordPiece one gives the vocab,
a BPE / Unigram one (RoBERTa's, ModernBERT's) a ``PretrainedTokenizer`` (``ModelSource.tokenizer``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.models import modernbert
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.models.heads import HEADS, check_source_weights, load_full_weights
from bertprep.bert_model.models.modernbert_config import MASKED_LM_ARCHITECTURE as MODERNBERT_MLM_ARCHITECTURE
from bertprep.bert_model.models.modernbert_config import ModernBertConfig
from bertprep.bert_model.models.weights import load_state_dict_strict, tied_weights_keys
from bertprep.core.normalization import looks_cased
from bertprep.core.pretrained_tokenizer import (
    PretrainedTokenizer,
    load_pretrained_tokenizer,
    tokenizer_json_model_type,
)
from bertprep.core.vocab_files import (
    do_lower_case_of_tokenizer_json,
    parse_tokenizer_json,
    read_vocab_file,
    strip_accents_of_tokenizer_json,
)

logger = logging.getLogger(__name__)

#: Written beside the Hugging Face files by ``bertprep finetune``: the task settings ``predict`` needs.
FINETUNE_FILE = "finetune.json"
PRETRAINING_ARCHITECTURE = "BertForPreTraining"
#: The Hugging Face ``model_type`` values read as RoBERTa (BERT weights, RoBERTa's embeddings).
ROBERTA_MODEL_TYPES = ("roberta", "xlm-roberta")
#: RoBERTa's and XLM-R's masked-LM classes: built as ``BertForPreTraining`` (no next-sentence head weights).
ROBERTA_MLM_ARCHITECTURES = ("RobertaForMaskedLM", "XLMRobertaForMaskedLM")
#: RoBERTa's weight-name prefixes and their BERT names (``lm_head.decoder.bias`` is ``lm_head.bias`` again).
ROBERTA_KEYS = {
    "roberta.": "bert.",
    "lm_head.dense.": "cls.predictions.transform.dense.",
    "lm_head.layer_norm.": "cls.predictions.transform.LayerNorm.",
    "lm_head.decoder.weight": "cls.predictions.decoder.weight",
    "lm_head.bias": "cls.predictions.bias",
}
#: ``RobertaForSequenceClassification``'s head as BERT's: its dense + tanh on ``<s>`` is BERT's pooler, its
#: ``out_proj`` BERT's classifier (the same function in eval mode; RoBERTa adds one more dropout in training).
ROBERTA_CLASSIFIER_KEYS = {"classifier.dense.": "bert.pooler.dense.", "classifier.out_proj.": "classifier."}


@dataclass
class ModelSource:
    """A model found on disk, read but not yet built (see ``load_model_source``)."""

    path: str
    """The directory the weights were read from (a checkpoint's ``step-*`` directory when given a run)."""
    kind: str
    """``"bertprep-checkpoint"`` or ``"huggingface"``."""
    config: BertConfig | ModernBertConfig
    """Encoder hyper-parameters (``ModernBertConfig`` for a ModernBERT run or export)."""
    state_dict: dict[str, torch.Tensor]
    """Weights under Hugging Face names (normalised)."""
    architecture: str
    """``BertForPreTraining`` for pre-training checkpoints, else ``config.json``'s ``architectures[0]``."""
    vocab_tokens: list[str] | None = None
    """The vocab beside the weights in id order (``vocab.txt``, else the ``tokenizer.json``'s), when there is one."""
    do_lower_case: bool | None = None
    """Casing recorded with the model (tokenizer files, shard manifest or finetune.json); None if unknown."""
    strip_accents: bool | None = None
    """Accent stripping recorded with the model (effective value: tokenizer files, shard manifest or
    finetune.json); None if unknown (then it follows ``do_lower_case``, the original's rule)."""
    hf_config: dict[str, Any] = field(default_factory=dict)
    """The raw ``config.json`` (``id2label``, ``problem_type``...); empty for bertprep checkpoints."""
    finetune: dict[str, Any] | None = None
    """``finetune.json`` of a ``bertprep finetune`` output, else None."""
    tokenizer: PretrainedTokenizer | None = None
    """The BPE / Unigram tokenizer beside the weights (RoBERTa's, ModernBERT's), else None (BERT WordPiece)."""

    @property
    def id2label(self) -> dict[int, str] | None:
        raw = self.hf_config.get("id2label")
        return {int(k): str(v) for k, v in raw.items()} if raw else None


# -------------------------------------------------------------------------------------------------- reading


def normalize_hf_state_dict(state_dict: dict[str, torch.Tensor], model_type: str = "bert") -> dict[str, torch.Tensor]:
    """Map older Hugging Face / converted-TF BERT key spellings onto the current ones.

    ``LayerNorm.gamma`` -> ``LayerNorm.weight``, ``LayerNorm.beta`` -> ``LayerNorm.bias``; the
    ``embeddings.position_ids`` buffer some files persist is dropped; a bare ``BertModel`` file (keys
    ``embeddings.*``, ``encoder.*``, ``pooler.*``) gets the ``bert.`` prefix. With ``model_type``
    ``"modernbert"`` only the last applies, as ModernBERT's: a bare ``ModernBertModel`` file (keys
    ``embeddings.*``, ``layers.*``, ``final_norm.*``) gets the ``model.`` prefix of its heads.
    """
    if model_type == "modernbert":
        bare = not any(k.startswith("model.") for k in state_dict) and any(
            k.startswith(("embeddings.", "layers.")) for k in state_dict
        )
        return {("model." + k if bare else k): v for k, v in state_dict.items()}
    if model_type in ROBERTA_MODEL_TYPES:
        state_dict = _roberta_to_bert_names(state_dict)
    out: dict[str, torch.Tensor] = {}
    bare = not any(k.startswith("bert.") for k in state_dict) and any(
        k.startswith(("embeddings.", "encoder.")) for k in state_dict
    )
    for key, value in state_dict.items():
        if key.endswith("position_ids"):
            continue
        if key.endswith("LayerNorm.gamma"):
            key = key[: -len("gamma")] + "weight"
        elif key.endswith("LayerNorm.beta"):
            key = key[: -len("beta")] + "bias"
        if bare and key.startswith(("embeddings.", "encoder.", "pooler.")):
            key = "bert." + key
        out[key] = value
    return out


def _roberta_to_bert_names(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """RoBERTa's weight names as BERT's (:data:`ROBERTA_KEYS`, :data:`ROBERTA_CLASSIFIER_KEYS`);
    ``lm_head.decoder.bias`` (``lm_head.bias`` tied) and the persisted ``token_type_ids`` buffer are dropped."""
    out = {}
    for key, value in state_dict.items():
        if key == "lm_head.decoder.bias" or key.endswith("embeddings.token_type_ids"):
            continue
        for prefix, bert in {**ROBERTA_KEYS, **ROBERTA_CLASSIFIER_KEYS}.items():
            if key.startswith(prefix):
                key = bert + key[len(prefix) :]
                break
        out[key] = value
    return out


def load_safetensors(path: str) -> dict[str, torch.Tensor]:
    """The tensors of a ``.safetensors`` file (on the CPU).

    Raises:
        ValueError: the file is truncated or not safetensors (safetensors' SafetensorError was a traceback),
            naming it and what to do.
    """
    try:
        return load_file(path, device="cpu")
    except SafetensorError as err:
        raise ValueError(
            f"{path} is damaged or incomplete ({err}); copy or download it again (a cut-short download or copy "
            "leaves such a file)"
        ) from None


@contextlib.contextmanager
def _torch_allowlist_only() -> Iterator[None]:
    """For the block, ``torch.load(weights_only=True)`` allows torch's own types only. Some libraries widen its
    allowlist for the whole process when imported: Megatron-LM's ``megatron/core/__init__.py`` calls
    ``megatron.core.safe_globals.register_safe_globals()``, adding ``PosixPath``, ``argparse.Namespace``,
    ``BytesIO``, ``SimpleNamespace`` and its own classes (megatron-core 0.16; imported by ``make-shards
    --output-format megatron``), after which a pickle holding such objects would load as "weights". The classes
    the process had added are put back afterwards."""
    added = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        yield
    finally:
        torch.serialization.add_safe_globals(added)


def _load_pytorch_bin(path: str) -> dict[str, torch.Tensor]:
    """``torch.load(path, weights_only=True)`` with torch's own allowlist (:func:`_torch_allowlist_only`): tensors
    only, nothing in the pickle is run.

    Raises:
        ValueError: naming ``path``: the file is cut short or damaged, or its pickle holds more than weights
            (objects whose loading would run code: refused, nothing ran).
    """
    import pickle

    try:
        with _torch_allowlist_only():
            state_dict = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "weights only load failed" in first.lower():
            raise ValueError(
                f"{path}: refused, its pickle holds objects other than weights, whose loading would run code "
                "(nothing was run); use a model.safetensors, or a pytorch_model.bin you trust converted to one"
            ) from None
        raise ValueError(f"{path}: not a readable PyTorch weight file ({first}); the file is damaged") from None
    except (RuntimeError, EOFError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"{path}: not a readable PyTorch weight file ({first}); the file is cut short or damaged"
        ) from None
    if not isinstance(state_dict, dict):
        raise ValueError(f"{path}: holds a {type(state_dict).__name__}, not a dict of weights")
    return state_dict


def read_hf_state_dict(model_dir: str, model_type: str = "bert") -> dict[str, torch.Tensor]:
    """Weights of a Hugging Face directory: ``model.safetensors`` (or its sharded index), else
    ``pytorch_model.bin`` loaded with ``torch.load(weights_only=True)``; keys normalised
    (``normalize_hf_state_dict`` for ``model_type``, ``config.json``'s).

    Raises ``FileNotFoundError`` (naming the directory) when there is no weight file.
    """
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    binary = os.path.join(model_dir, "pytorch_model.bin")
    if os.path.exists(single):
        state_dict = load_safetensors(single)
    elif os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        state_dict = {}
        for name in files:
            state_dict.update(load_safetensors(os.path.join(model_dir, name)))
    elif os.path.exists(binary):
        state_dict = _load_pytorch_bin(binary)
    else:
        raise FileNotFoundError(
            f"{model_dir}: no model.safetensors or pytorch_model.bin (a Hugging Face BERT "
            "directory holds config.json, one of those and vocab.txt)"
        )
    return normalize_hf_state_dict(state_dict, model_type)


def bert_config_from_hf(hf_config: dict[str, Any], where: str = "config.json") -> BertConfig:
    """``BertConfig`` from a Hugging Face ``config.json`` dict; keys this model does not use are ignored.

    Raises ``ValueError`` for a non-BERT ``model_type``, relative position embeddings or an activation other
    than exact GELU (this model implements the paper's architecture only).
    """
    model_type = hf_config.get("model_type", "bert")
    if model_type not in ("bert", *ROBERTA_MODEL_TYPES):
        raise ValueError(
            f"{where}: model_type is {model_type!r}; bertprep loads BERT ('bert'), RoBERTa ('roberta', "
            "'xlm-roberta') and ModernBERT ('modernbert') models"
        )
    position = hf_config.get("position_embedding_type", "absolute")
    if position != "absolute":
        raise ValueError(f"{where}: position_embedding_type {position!r} is not supported (only 'absolute')")
    names = set(BertConfig.__dataclass_fields__) - {"position_offset"}
    values = {k: v for k, v in hf_config.items() if k in names}
    if model_type in ROBERTA_MODEL_TYPES:  # positions numbered from padding_idx + 1 (RobertaEmbeddings)
        values["position_offset"] = int(hf_config.get("pad_token_id", 1)) + 1
    try:
        return BertConfig(**values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {err}") from None


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


def _do_lower_case_from_dir(model_dir: str) -> bool | None:
    config_path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(config_path):
        value = _read_json(config_path).get("do_lower_case")
        if value is not None:
            return bool(value)
    tokenizer_path = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(tokenizer_path):
        with open(tokenizer_path, encoding="utf-8") as f:
            return do_lower_case_of_tokenizer_json(f.read())
    return None


def _strip_accents_from_dir(model_dir: str) -> bool | None:
    """Effective ``strip_accents`` of a Hugging Face directory: ``tokenizer_config.json`` (whose ``null``
    follows its ``do_lower_case``, as ``transformers`` reads it), else ``tokenizer.json``'s normalizer."""
    config_path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(config_path):
        config = _read_json(config_path)
        if config.get("strip_accents") is not None:
            return bool(config["strip_accents"])
        if config.get("do_lower_case") is not None:
            return bool(config["do_lower_case"])
    tokenizer_path = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(tokenizer_path):
        with open(tokenizer_path, encoding="utf-8") as f:
            return strip_accents_of_tokenizer_json(f.read())
    return None


def _shards_setting(shard_dir: str | None, key: str, cache_dir: str | None = None) -> bool | None:
    """``key`` (``do_lower_case``, ``strip_accents``) as a shard directory's ``manifest.json`` records it (its
    ``vocab`` section, else its ``config``); None if not recorded, or the manifest is missing or unreadable. For a
    bucket's directory (``gs://``, ``s3://``) the manifest is the copy that reading it through the shard cache
    ``cache_dir`` (default: train's) kept there (``storage.cached_manifest``): no request to the bucket."""
    from bertprep.core.storage import cached_manifest, is_remote

    if not shard_dir:
        return None
    manifest = (
        cached_manifest(shard_dir, cache_dir) if is_remote(shard_dir) else os.path.join(shard_dir, "manifest.json")
    )
    if not os.path.exists(manifest):
        return None
    try:
        data = _read_json(manifest)
    except ValueError:
        return None
    value = (data.get("vocab") or {}).get(key, (data.get("config") or {}).get(key))
    return None if value is None else bool(value)


def shards_strip_accents(shard_dir: str | None, cache_dir: str | None = None) -> bool | None:
    """The accent stripping a shard directory was made with (its ``manifest.json``: ``strip_accents`` where
    it differs from ``do_lower_case``, else ``do_lower_case``); None if unknown or unreadable. ``cache_dir``: as
    :func:`_shards_setting`."""
    value = _shards_setting(shard_dir, "strip_accents", cache_dir)
    return value if value is not None else shards_do_lower_case(shard_dir, cache_dir)


def shards_do_lower_case(shard_dir: str | None, cache_dir: str | None = None) -> bool | None:
    """The casing a shard directory was made with (its ``manifest.json``); None if unknown or unreadable.
    ``cache_dir``: as :func:`_shards_setting`."""
    return _shards_setting(shard_dir, "do_lower_case", cache_dir)


def _checkpoint_shards(state: dict[str, Any]) -> tuple[str | None, str | None]:
    """The shards a checkpoint was trained on and the shard cache its run read them through (a bucket's)."""
    return (state.get("data") or {}).get("shards"), (state.get("train_config") or {}).get("cache_dir")


def _do_lower_case_from_checkpoint(state: dict[str, Any]) -> bool | None:
    """The casing of the shards a checkpoint was trained on (their manifest), when still on disk (or, for a
    bucket's, its copy in the shard cache)."""
    return shards_do_lower_case(*_checkpoint_shards(state))


def is_model_source(path: str) -> bool:
    """Whether ``path`` looks like something ``load_model_source`` reads."""
    try:
        ckpt.resolve_checkpoint(path)
        return True
    except FileNotFoundError:
        return os.path.exists(os.path.join(path, "config.json"))


def load_model_source(path: str) -> ModelSource:
    """Read a model to fine-tune, export or predict with, from any of:

    * a bertprep pre-training checkpoint (``step-*`` directory) or run directory (its latest checkpoint);
    * a Hugging Face BERT directory (``config.json`` + ``model.safetensors`` / ``pytorch_model.bin``, with
      ``vocab.txt``), e.g. ``bert-base-uncased`` downloaded earlier, or a ``bertprep export`` output;
    * a ``bertprep finetune`` output (its ``best/`` directory, or the run directory holding it).

    Raises ``FileNotFoundError`` / ``ValueError`` saying what is missing or wrong.
    """
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: no such directory")
    if os.path.isdir(os.path.join(path, "best")) and not os.path.exists(os.path.join(path, "config.json")):
        path = os.path.join(path, "best")  # a finetune run directory
    try:
        checkpoint_dir = ckpt.resolve_checkpoint(path)
    except FileNotFoundError:
        checkpoint_dir = None
    if checkpoint_dir is not None:
        return _checkpoint_source(checkpoint_dir)
    return _hf_directory_source(path)


def _checkpoint_source(checkpoint_dir: str) -> ModelSource:
    """A bertprep pre-training checkpoint (``step-*``), its files verified against their recorded sha256
    first (a damaged file is named, not used); the casing and accent stripping are its shards'."""
    state = ckpt.verify_checkpoint(checkpoint_dir)
    modern = state["model_config"].get("architecture") == "modernbert"
    config = (ModernBertConfig if modern else BertConfig).from_dict(state["model_config"])
    weights = load_safetensors(os.path.join(checkpoint_dir, "model.safetensors"))
    tokens, tokenizer = tokenizer_beside(checkpoint_dir)
    return ModelSource(
        path=checkpoint_dir,
        kind="bertprep-checkpoint",
        config=config,
        state_dict=weights,
        architecture=MODERNBERT_MLM_ARCHITECTURE if modern else PRETRAINING_ARCHITECTURE,
        vocab_tokens=tokens,
        do_lower_case=_do_lower_case_from_checkpoint(state),
        strip_accents=shards_strip_accents(*_checkpoint_shards(state)),
        tokenizer=tokenizer,
    )


def _hf_directory_source(path: str) -> ModelSource:
    """A Hugging Face model directory (or a ``bertprep export`` / ``finetune`` output): its ``config.json``,
    weights, tokenizer files and, when present, ``finetune.json``.

    Raises ``FileNotFoundError`` without ``config.json``, ``ValueError`` for a config that does not load."""
    config_path = os.path.join(path, "config.json")
    if not os.path.exists(config_path):
        raise FileNotFoundError(
            f"{path}: neither a bertprep checkpoint (step-*/state.json) nor a Hugging Face model directory "
            "(config.json + model.safetensors or pytorch_model.bin + vocab.txt)"
        )
    hf_config = _read_json(config_path)
    config = _encoder_config_from_hf(hf_config, config_path)
    state_dict = read_hf_state_dict(path, hf_config.get("model_type", "bert"))
    tokens, tokenizer = tokenizer_beside(path)
    finetune_file = os.path.join(path, FINETUNE_FILE)
    finetune = _read_json(finetune_file) if os.path.exists(finetune_file) else None
    do_lower_case = _do_lower_case_from_dir(path)
    if do_lower_case is None and finetune is not None:
        do_lower_case = finetune.get("do_lower_case")
    strip_accents = _strip_accents_from_dir(path)
    if strip_accents is None and finetune is not None:
        strip_accents = finetune.get("strip_accents", finetune.get("do_lower_case"))
    return ModelSource(
        path=path,
        kind="huggingface",
        config=config,
        state_dict=state_dict,
        architecture=_hf_architecture(hf_config, state_dict),
        vocab_tokens=tokens,
        do_lower_case=do_lower_case,
        strip_accents=strip_accents,
        hf_config=hf_config,
        finetune=finetune,
        tokenizer=tokenizer,
    )


def _encoder_config_from_hf(hf_config: dict[str, Any], config_path: str) -> BertConfig | ModernBertConfig:
    """The encoder configuration of a Hugging Face ``config.json`` (``config_path``, named in errors):
    ModernBERT's without the head fields of a fine-tuned export, else ``bert_config_from_hf``'s.

    Raises ``ValueError`` naming ``config_path`` for fields that do not make a configuration."""
    if hf_config.get("model_type") == "modernbert":
        try:
            head_keys = ("num_labels", "finetuning_task")  # (a fine-tuned export's; not encoder settings)
            return ModernBertConfig.from_dict({k: v for k, v in hf_config.items() if k not in head_keys})
        except (TypeError, ValueError) as err:
            raise ValueError(f"{config_path}: {err}") from None
    return bert_config_from_hf(hf_config, config_path)


def _hf_architecture(hf_config: dict[str, Any], state_dict: dict[str, torch.Tensor]) -> str:
    """The model class a Hugging Face directory holds: the first of its ``architectures`` (else inferred
    from the weights' names); a RoBERTa head other than masked LM as its BERT head (``RobertaModel`` ->
    ``BertModel``)."""
    architectures = hf_config.get("architectures") or [infer_architecture(state_dict)]
    if hf_config.get("model_type") in ROBERTA_MODEL_TYPES and architectures[0] not in ROBERTA_MLM_ARCHITECTURES:
        architectures = ["Bert" + architectures[0].split("Roberta", 1)[-1]]  # its BERT head (RobertaModel: BertModel)
    return architectures[0]


def tokenizer_beside(model_dir: str) -> tuple[list[str] | None, PretrainedTokenizer | None]:
    """``(vocab tokens in id order, BPE / Unigram tokenizer)`` of the files beside a model's weights:
    ``vocab.txt`` (BERT; no tokenizer), else ``tokenizer.json`` (WordPiece: its vocab; BPE / Unigram: its
    :class:`PretrainedTokenizer`), else ``(None, None)``.

    Raises:
        ValueError: a vocab file that cannot be read (``vocab_files.VocabError``, naming it).
    """
    vocab_file = os.path.join(model_dir, "vocab.txt")
    tokenizer_file = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(vocab_file):
        return read_vocab_file(vocab_file), None
    if not os.path.exists(tokenizer_file):
        return None, None
    if tokenizer_json_model_type(tokenizer_file) == "WordPiece":
        with open(tokenizer_file, encoding="utf-8") as f:
            return parse_tokenizer_json(f.read(), tokenizer_file)[0], None
    tokenizer = load_pretrained_tokenizer(model_dir)
    return tokenizer.tokens, tokenizer


def infer_architecture(state_dict: dict[str, torch.Tensor]) -> str:
    """The Hugging Face class a state dict belongs to, for a ``config.json`` without ``architectures``:
    ``qa_outputs`` -> question answering; ``classifier`` with a pooler -> sequence, without -> token
    classification; ``cls.predictions`` -> pre-training; otherwise a bare ``BertModel``."""
    if "qa_outputs.weight" in state_dict:
        return "BertForQuestionAnswering"
    if "classifier.weight" in state_dict:
        pooled = "bert.pooler.dense.weight" in state_dict
        return "BertForSequenceClassification" if pooled else "BertForTokenClassification"
    if "cls.predictions.transform.dense.weight" in state_dict:
        return PRETRAINING_ARCHITECTURE
    return "BertModel"


def resolve_do_lower_case(requested: bool | None, source_value: bool | None, tokens: list[str]) -> bool:
    """The casing to tokenize with: the explicit choice, else the model's record, else guessed from the vocab
    (uncased when it has almost no upper-case pieces), logging which."""
    if requested is not None:
        if source_value is not None and source_value != requested:
            logger.warning(
                "do_lower_case=%s given, but the model was trained with do_lower_case=%s", requested, source_value
            )
        return requested
    if source_value is not None:
        return source_value
    guess = not looks_cased(tokens)
    logger.info(
        "the model does not record do_lower_case; the vocab looks %s, so do_lower_case=%s",
        "uncased" if guess else "cased",
        guess,
    )
    return guess


def build_model(source: ModelSource) -> nn.Module:
    """The complete model a source holds (pre-training model or fine-tuned head), weights loaded strictly.

    Raises ``ValueError`` for an architecture bertprep does not implement (e.g. a bare ``BertModel``).
    """
    model: nn.Module
    if source.architecture in (PRETRAINING_ARCHITECTURE, *ROBERTA_MLM_ARCHITECTURES):
        assert isinstance(source.config, BertConfig)  # (the architecture's config, as load_model_source reads it)
        model = BertForPreTraining(source.config)
        if source.architecture == PRETRAINING_ARCHITECTURE:
            load_state_dict_strict(model, source.state_dict)
        else:  # RoBERTa: its next-sentence head starts as BERT's initialises it
            load_pretraining_weights(model, source.state_dict)
        return model
    if source.architecture == MODERNBERT_MLM_ARCHITECTURE:
        assert isinstance(source.config, ModernBertConfig)
        model = modernbert.ModernBertForMaskedLM(source.config)
        load_state_dict_strict(model, source.state_dict)
        return model
    if source.architecture not in HEADS:
        raise ValueError(
            f"{source.path}: architecture {source.architecture!r} is not one bertprep builds; "
            f"supported: {PRETRAINING_ARCHITECTURE}, {', '.join(HEADS)}"
        )
    cls: Any = HEADS[source.architecture]  # (each head class has its own constructor arguments)
    id2label = source.id2label
    if source.architecture == "BertForQuestionAnswering":
        model = cls(source.config)
    else:
        num_labels = len(id2label) if id2label else int(source.hf_config.get("num_labels", 2))
        model = cls(source.config, num_labels=num_labels)
    load_full_weights(model, source.state_dict)
    return model


# ------------------------------------------------------------------------- continued pre-training (train)


def check_same_vocab(shard_tokens: list[str], model_tokens: list[str] | None, *, shards: str, model: str) -> None:
    """Refuse to pre-train a model on shards made with another vocab: the two ``vocab.txt`` must be equal
    token for token (same tokens at the same ids), as every id in the shards indexes the model's embeddings.

    Args:
        shard_tokens: the shards' vocab in id order (``vocab.txt`` in the shard directory).
        model_tokens: the model's ``vocab.txt`` in id order; None when the model directory has none.
        shards, model: the two locations, for the message.
    Raises:
        ValueError: no model vocab, or the first id where the two differ (token in each, or the shorter end),
            with the fix (``make-shards --vocab MODEL/vocab.txt``).
    """
    vocab_txt, tokenizer_json = os.path.join(model, "vocab.txt"), os.path.join(model, "tokenizer.json")
    by_tokenizer = os.path.exists(tokenizer_json) and not os.path.exists(vocab_txt)
    named = tokenizer_json if by_tokenizer else vocab_txt  # the file the model's vocab was read from
    fix = f"make the shards with the model's vocab: bertprep make-shards --vocab {model if by_tokenizer else vocab_txt}"
    if model_tokens is None:
        raise ValueError(
            f"{model} has no vocab.txt or tokenizer.json beside its weights, so the shards' vocab cannot be "
            f"checked against it; put the model's tokenizer files there ({fix})"
        )
    for i, (a, b) in enumerate(zip(shard_tokens, model_tokens, strict=False)):  # the lengths are compared below
        if a != b:
            raise ValueError(
                f"the vocab of shards {shards} differs from {named} at id {i}: {a!r} in the "
                f"shards, {b!r} in the model; {fix}"
            )
    if len(shard_tokens) != len(model_tokens):
        i = min(len(shard_tokens), len(model_tokens))
        raise ValueError(
            f"the vocab of shards {shards} has {len(shard_tokens)} entries and {named} "
            f"{len(model_tokens)}: they differ from id {i} on; {fix}"
        )


def load_pretraining_weights(
    model: BertForPreTraining | modernbert.ModernBertForMaskedLM, state_dict: dict[str, torch.Tensor]
) -> tuple[list[str], list[str]]:
    """Start a ``BertForPreTraining`` from any Hugging Face BERT state dict (normalised names, see
    ``normalize_hf_state_dict``): ``BertModel`` (encoder, maybe without pooler), ``BertForMaskedLM`` (encoder
    and MLM head, no pooler) or ``BertForPreTraining`` (everything), for continued pre-training; or a
    ``ModernBertForMaskedLM`` from a Hugging Face ModernBERT one: ``ModernBertModel`` (encoder),
    ``ModernBertForMaskedLM`` (everything) or a fine-tuned ModernBERT head (encoder and ``head.*``).

    Every encoder parameter (``bert.embeddings.*``, ``bert.encoder.*``; ModernBERT's ``model.*``) must be
    present with the model's shape. Parameters the source lacks keep the values ``model`` was built with,
    which is the original's initialisation (google-research/bert ``modeling.py``: truncated normal(0, 0.02),
    biases 0, LayerNorm 1/0; ModernBERT's ``_init_weights``): the pooler, the MLM transform and output bias,
    the NSP classifier (ModernBERT: ``head.*``, ``decoder.bias``). The MLM decoder stays tied to the word
    embeddings; a ``cls.predictions.decoder.weight`` (``decoder.weight``) in the source must equal them.

    Returns:
        ``(initialised, unused)``: the model's parameter names left at their initial values, and the
        source's keys not used (e.g. a fine-tuned ``classifier.*``), both sorted.
    Raises:
        ValueError: encoder parameters missing (not a checkpoint of the model's architecture), other shapes
            (another model size), or an untied decoder.
    """
    modern = isinstance(model, modernbert.ModernBertForMaskedLM)
    tied = tied_weights_keys(model)
    state_dict = dict(state_dict)
    for alias, target in tied.items():
        if alias in state_dict:
            value = state_dict.pop(alias)
            if target in state_dict and not torch.equal(value, state_dict[target]):
                raise ValueError(
                    f"{alias} is not tied to {target} in the source weights; bertprep's MLM decoder "
                    "is the word embedding matrix, as in BERT"
                )
            state_dict.setdefault(target, value)
    own = {k: v for k, v in model.state_dict().items() if k not in tied}
    check_source_weights(own, state_dict, list(own), "model." if modern else "bert.")
    model.load_state_dict({k: v for k, v in state_dict.items() if k in own}, strict=False)
    return sorted(k for k in own if k not in state_dict), sorted(k for k in state_dict if k not in own)


def max_sequence_length(config: BertConfig | ModernBertConfig) -> int:
    """The longest sequence a model takes: ``max_position_embeddings`` less RoBERTa's ``position_offset``."""
    return config.max_position_embeddings - getattr(config, "position_offset", 0)


__all__ = [
    "FINETUNE_FILE",
    "PRETRAINING_ARCHITECTURE",
    "ModelSource",
    "bert_config_from_hf",
    "build_model",
    "check_same_vocab",
    "infer_architecture",
    "is_model_source",
    "load_model_source",
    "load_pretraining_weights",
    "max_sequence_length",
    "normalize_hf_state_dict",
    "read_hf_state_dict",
    "resolve_do_lower_case",
    "shards_do_lower_case",
    "shards_strip_accents",
    "tokenizer_beside",
]
