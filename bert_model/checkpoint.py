"""Checkpoints as plain files: safetensors for tensors, JSON for everything else, written atomically.

A checkpoint is a directory ``<run_dir>/checkpoints/step-000123/`` holding

* ``model.safetensors``: the ``BertForPreTraining`` weights under Hugging Face names, tied aliases left out
  (the file ``transformers.BertForPreTraining.from_pretrained`` reads, with ``config.json`` beside it);
* ``optimizer.safetensors``: the optimizer state tensors named ``<parameter name>/<state key>``
  (``bert.pooler.dense.weight/exp_avg``), so they map back by parameter name, not position;
* ``config.json``: the model config in Hugging Face form; ``vocab.txt``: the vocab of the training shards;
* ``state.json``: step, scheduler state, optimizer hyper-parameters, model / training / data configs, and per
  rank the data cursor and the RNG states (torch CPU and CUDA as base64, Python and numpy as lists).

It is written into ``checkpoints/.tmp-step-000123-<pid>/`` (each file flushed and fsync'ed) and then renamed
with ``os.replace``, so a directory named ``step-*`` is always complete. Loading reads safetensors and JSON
only: no pickle, nothing on disk is ever executed (``torch.load`` is not used).
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from bertprep.bert_model.model import load_state_dict_strict, trainable_state_dict

CHECKPOINT_FORMAT = 1
CHECKPOINTS_DIR = "checkpoints"
_STEP_RE = re.compile(r"^step-(\d+)$")


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


# ---------------------------------------------------------------------------------------------- RNG states


def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.numpy().tobytes()).decode("ascii")


def _unb64(s: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8)


def capture_rng_state() -> dict[str, Any]:
    """RNG states of this process as JSON values: torch CPU (and CUDA), Python ``random``, numpy."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": _b64(torch.get_rng_state()),
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of ``capture_rng_state``."""
    torch.set_rng_state(_unb64(state["torch"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


# ----------------------------------------------------------------------------------------- optimizer state


def optimizer_state_to_flat(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into named tensors and JSON metadata.

    The parameter groups must carry ``param_names`` (``optim.param_groups`` does). Returns
    ``(tensors, meta)``: tensors named ``<param name>/<key>``, and ``meta`` with the groups' hyper-parameters
    and names plus any non-tensor state values.
    """
    sd = optimizer.state_dict()
    index_to_name: dict[int, str] = {}
    groups = []
    for group in sd["param_groups"]:
        if "param_names" not in group:
            raise ValueError("optimizer parameter groups need 'param_names' (build them with optim.param_groups)")
        index_to_name.update(zip(group["params"], group["param_names"]))
        groups.append({k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items() if k != "params"})
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, param_state in sd["state"].items():
        name = index_to_name[index]
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{name}/{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(name, {})[key] = value
    return tensors, {"param_groups": groups, "scalars": scalars}


def optimizer_state_from_flat(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict
                              ) -> None:
    """Load what ``optimizer_state_to_flat`` produced into ``optimizer`` (matched by parameter name).

    Raises ``ValueError`` when the saved parameter names differ from the optimizer's.
    """
    current = optimizer.state_dict()["param_groups"]
    saved = meta["param_groups"]
    if [g.get("param_names") for g in current] != [g["param_names"] for g in saved]:
        raise ValueError("the checkpoint's optimizer parameter names differ from this model's; "
                         "was it saved from a model of another architecture?")
    name_to_index = {n: i for g in current for i, n in zip(g["params"], g["param_names"])}
    state: dict[int, dict[str, Any]] = {}
    for key, tensor in tensors.items():
        name, field = key.rsplit("/", 1)
        state.setdefault(name_to_index[name], {})[field] = tensor
    for name, values in meta.get("scalars", {}).items():
        state.setdefault(name_to_index[name], {}).update(values)
    groups = []
    for cur, sav in zip(current, saved):
        group = {k: (tuple(v) if k == "betas" else v) for k, v in sav.items()}
        group["params"] = cur["params"]
        groups.append(group)
    optimizer.load_state_dict({"state": state, "param_groups": groups})


# ------------------------------------------------------------------------------------------ save and load


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def list_checkpoints(checkpoints_dir: str) -> list[tuple[int, str]]:
    """``(step, path)`` of the complete checkpoints in ``checkpoints_dir``, by step."""
    if not os.path.isdir(checkpoints_dir):
        return []
    found = []
    for name in os.listdir(checkpoints_dir):
        m = _STEP_RE.match(name)
        path = os.path.join(checkpoints_dir, name)
        if m and os.path.exists(os.path.join(path, "state.json")):
            found.append((int(m.group(1)), path))
    return sorted(found)


def save_checkpoint(
    run_dir: str,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    hf_config: dict | None = None,
    vocab_file: str | None = None,
    keep_last: int = 3,
) -> str:
    """Write ``run_dir/checkpoints/step-<step>/`` atomically and delete all but the last ``keep_last``.

    ``state`` is the JSON part (``state.json``); ``optimizer`` hyper-parameters are added to it. Returns the
    checkpoint path. On any error the temporary directory is removed and the error re-raised.
    """
    root = os.path.join(run_dir, CHECKPOINTS_DIR)
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, checkpoint_name(step))
    tmp = os.path.join(root, f".tmp-{checkpoint_name(step)}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        weights = {k: v.detach().to("cpu").contiguous() for k, v in trainable_state_dict(model).items()}
        save_file(weights, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        opt_tensors, opt_meta = optimizer_state_to_flat(optimizer)
        save_file(opt_tensors, os.path.join(tmp, "optimizer.safetensors"), metadata={"format": "pt"})
        for name in ("model.safetensors", "optimizer.safetensors"):
            _fsync_file(os.path.join(tmp, name))
        if hf_config is not None:
            _write_json(os.path.join(tmp, "config.json"), hf_config)
        if vocab_file is not None and os.path.exists(vocab_file):
            shutil.copyfile(vocab_file, os.path.join(tmp, "vocab.txt"))
            _fsync_file(os.path.join(tmp, "vocab.txt"))
        _write_json(os.path.join(tmp, "state.json"),
                    {"format": CHECKPOINT_FORMAT, **state, "step": step, "optimizer": opt_meta})
        if os.path.exists(final):  # the same step saved again (e.g. end of run right after a periodic save)
            old = f"{final}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep_last > 0:
        for _, path in list_checkpoints(root)[:-keep_last]:
            shutil.rmtree(path, ignore_errors=True)
    return final


def resolve_checkpoint(path: str) -> str:
    """The checkpoint directory meant by ``path``: a ``step-*`` directory itself, or a run directory / its
    ``checkpoints/`` folder (then the latest complete checkpoint in it).

    Raises ``FileNotFoundError`` (saying where it looked) when there is none.
    """
    if os.path.exists(os.path.join(path, "state.json")):
        return path
    for candidate in (os.path.join(path, CHECKPOINTS_DIR), path):
        found = list_checkpoints(candidate)
        if found:
            return found[-1][1]
    raise FileNotFoundError(f"no complete checkpoint (step-*/state.json) in {path} or {path}/{CHECKPOINTS_DIR}")


def read_checkpoint_state(path: str) -> dict[str, Any]:
    """``state.json`` of a checkpoint directory (JSON only). Raises ``ValueError`` for another format."""
    with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
        state = json.load(f)
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}/state.json: checkpoint format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
    return state


def load_model_weights(path: str, model: nn.Module) -> None:
    """Load ``path/model.safetensors`` into ``model`` strictly (``model.load_state_dict_strict``)."""
    load_state_dict_strict(model, load_file(os.path.join(path, "model.safetensors"), device="cpu"))


def load_optimizer_state(path: str, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load ``path/optimizer.safetensors`` (+ the hyper-parameters in ``state``) into ``optimizer``."""
    with safe_open(os.path.join(path, "optimizer.safetensors"), framework="pt", device="cpu") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    optimizer_state_from_flat(optimizer, tensors, state["optimizer"])
