"""Hugging Face Hub model ids (``answerdotai/ModernBERT-base``, ``roberta-base``) wherever a command takes a model
or tokenizer directory (``--model``, ``make-shards --vocab``), through ``huggingface_hub``'s cache.

:func:`resolve_model_dir` gives the local snapshot directory of an id: ``huggingface_hub.snapshot_download`` of
the files bertprep reads (:data:`MODEL_FILES`: the config, safetensors weights and tokenizer files; no
``pytorch_model.bin``, TensorFlow or Flax weights), from the cache (``HF_HUB_CACHE``, ``HF_HOME``; default
``~/.cache/huggingface/hub``). With ``HF_HUB_OFFLINE=1`` only the cache is read, and a model not in it is one
line saying how to download it. Without it the download happens there (and a cached copy is used when the
network fails). A path that exists, or a URL, is returned as it is: a local directory always wins over an id.
"""

from __future__ import annotations

import os
import re

from bertprep.core import storage

#: The files of a model repository bertprep reads (``allow_patterns``).
MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "model-*.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
#: A Hub model id: ``name`` or ``owner/name`` (letters, digits, ``-``, ``_``, ``.``).
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")


class HubError(ValueError):
    """A Hub id that cannot be resolved; the message says what to do, in one line."""


def is_hub_id(value: str) -> bool:
    """Whether ``value`` names a Hub model rather than a path: no such path exists, it is not a URL, and it has
    the form ``name`` or ``owner/name`` (not ``./x``, ``x/y/z`` or ``x.json``)."""
    if os.path.exists(value) or storage.is_remote(value) or value.endswith((".json", ".txt")):
        return False
    return bool(_HUB_ID.match(value)) and not value.startswith(".")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def resolve_model_dir(value: str) -> str:
    """The local directory of ``value``: ``value`` itself when it is a path (or URL), else the cached snapshot of
    the Hub model it names (downloaded first unless ``HF_HUB_OFFLINE=1``).

    Raises:
        HubError: the id is not in the cache while offline (with the download command), the Hub has no such
            model, or ``huggingface_hub`` is not installed.
    """
    if not is_hub_id(value):
        return value
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError:
        raise HubError(f"{value}: a Hugging Face Hub id needs huggingface_hub (pip install huggingface_hub)") from None
    cache = os.environ.get("HF_HUB_CACHE") or None  # (read now, not at huggingface_hub's import)
    try:
        return snapshot_download(value, allow_patterns=list(MODEL_FILES), local_files_only=_offline(), cache_dir=cache)
    except LocalEntryNotFoundError:
        where = cache or "~/.cache/huggingface/hub"
        why = (
            "HF_HUB_OFFLINE is set, so only the cache is read"
            if _offline()
            else "it could not be downloaded (no network, or the Hub did not answer)"
        )
        raise HubError(
            f"{value}: no such local folder ({os.path.abspath(value)}); read as a Hugging Face Hub id it is not in the "
            f"Hugging Face cache ({where}) and {why}: check the path, or download the model on a machine with network "
            f"first: hf download {value}" + (" (or unset HF_HUB_OFFLINE)" if _offline() else "")
        ) from None
    except RepositoryNotFoundError:
        raise HubError(f"{value}: no such local directory, and no such model on the Hugging Face Hub") from None


__all__ = ["MODEL_FILES", "HubError", "is_hub_id", "resolve_model_dir"]
