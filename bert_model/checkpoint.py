"""Checkpoints as plain files: safetensors for tensors, JSON for everything else, written atomically.

A checkpoint is a directory ``<run_dir>/checkpoints/step-000123/`` holding

* ``model.safetensors``: the ``BertForPreTraining`` (or ``ModernBertForMaskedLM``) weights under Hugging Face
  names, tied aliases left out
  (the file ``transformers.BertForPreTraining.from_pretrained`` reads, with ``config.json`` beside it);
* ``optimizer.safetensors``: the optimizer state tensors named ``<parameter name>/<state key>``
  (``bert.pooler.dense.weight/exp_avg``), so they map back by parameter name, not position;
* ``config.json``: the model config in Hugging Face form; ``vocab.txt``: the vocab of the training shards (a BPE
  or Unigram tokenizer: its ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``);
* ``state.json``: step, scheduler state, optimizer hyper-parameters, model / training / data configs, and per
  rank the data cursor and the RNG states (torch CPU and CUDA as base64, Python and numpy as lists).

It is written into a staging folder ``checkpoints/.bertprep-checkpoint-<host>-<pid>-<8 hex>/`` (each file flushed
and fsync'ed; ``core.atomic``) and then renamed with ``os.replace``, so a directory named ``step-*`` is always
complete; a write that fails (a full disk) removes the temporary directory and leaves the earlier checkpoints as
they were. Files get the permissions of
any file the user creates (the umask), not safetensors' 0600. ``state.json`` records the sha256 and size of
every other file (``files``); ``load_intact_checkpoint`` checks them, so a truncated or bit-flipped checkpoint is
named and refused (or, for a run directory, skipped for the previous intact one) instead of being trained on.
Loading reads safetensors and JSON only: no pickle, nothing on disk is ever executed (``torch.load`` is not
used).
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import logging
import os
import random
import re
import shutil
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from bertprep.bert_model.loop_config import KEEP_LAST  # (re-exported: the default of keep_last)
from bertprep.bert_model.models.weights import load_state_dict_strict, row_layouts, trainable_state_dict  # (re-exp.)
from bertprep.bert_model.runtime import set_default_permissions
from bertprep.core import strict_json
from bertprep.core.atomic import fsync_file, replace_directory, staging_name, write_text_synced

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
CHECKPOINTS_DIR = "checkpoints"
_STEP_RE = re.compile(r"^step-(\d+)$")


class CheckpointError(ValueError):
    """A damaged checkpoint: unreadable ``state.json``, a file missing, truncated or not matching the sha256
    recorded when it was written. The message names the file."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (e.g. the disk is full); nothing of it was left behind and the
    earlier checkpoints are intact. The message names the checkpoint and says what to do."""


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
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)  # the tuple form (legacy=False: a dict)
    assert isinstance(keys, np.ndarray)
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


#: Names the tensors a parameter group (not a parameter's state) holds in ``optimizer.safetensors``.
_GROUP_PREFIX = "@group"


def optimizer_state_to_flat(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into named tensors and JSON metadata.

    The parameter groups must carry ``param_names`` (``optim.param_groups`` does). Returns
    ``(tensors, meta)``: tensors named ``<param name>/<key>`` (and ``@group<i>/<key>`` for a tensor a group
    holds, as ``optimi``'s step counter), and ``meta`` with the groups' hyper-parameters and names plus any
    non-tensor state values. A parameter kept in another layout than the state dict's (a fused QKV matrix, a
    padded vocab: ``weights.row_layouts``) has its state saved as the reference layout's parameters would have
    it (row slices, padding dropped), so the file is the same whether the model fuses and pads or not.
    """
    layouts = _optimizer_row_layouts(optimizer)
    sd = optimizer.state_dict()
    index_to_name: dict[int, str] = {}
    groups = []
    tensors: dict[str, torch.Tensor] = {}
    for i, group in enumerate(sd["param_groups"]):
        if "param_names" not in group:
            raise ValueError("optimizer parameter groups need 'param_names' (build them with optim.param_groups)")
        index_to_name.update(zip(group["params"], group["param_names"], strict=True))
        groups.append({k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items() if k != "params"})
        groups[-1]["param_names"] = _canonical_names(group["param_names"], layouts)
        for key in [k for k, v in groups[-1].items() if isinstance(v, torch.Tensor)]:
            tensor = groups[-1].pop(key)
            assert isinstance(tensor, torch.Tensor)
            tensors[f"{_GROUP_PREFIX}{i}/{key}"] = tensor.detach().to("cpu").contiguous()
    scalars: dict[str, dict[str, Any]] = {}
    for index, param_state in sd["state"].items():
        name = index_to_name[index]
        for part, start, stop in layouts.get(name, [(name, None, None)]):
            for key, value in param_state.items():
                if isinstance(value, torch.Tensor):
                    if start is not None:  # a part of a fused or padded parameter: its own copy (its rows, a step)
                        value = (value[start:stop] if value.dim() else value).clone()
                    tensors[f"{part}/{key}"] = value.detach().to("cpu").contiguous()
                else:
                    scalars.setdefault(part, {})[key] = value
    return tensors, {"param_groups": groups, "scalars": scalars}


def _optimizer_row_layouts(optimizer: torch.optim.Optimizer) -> dict[str, list[tuple[str, int, int]]]:
    named = [
        (n, p) for g in optimizer.param_groups for n, p in zip(g.get("param_names", []), g["params"], strict=False)
    ]
    return row_layouts(named)


def _canonical_names(names: list[str], layouts: dict[str, list[tuple[str, int, int]]]) -> list[str]:
    """Parameter names as the reference layout has them (a fused ``qkv`` as ``query``, ``key``, ``value``)."""
    return [part for name in names for part, _, _ in layouts.get(name, [(name, None, None)])]


def _group_tensors(tensors: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    """Group index -> the tensors that group held (saved as ``@group<i>/<key>``: ``optimi``'s step counter)."""
    found: dict[int, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        name, field = key.rsplit("/", 1)
        if name.startswith(_GROUP_PREFIX):
            found.setdefault(int(name.removeprefix(_GROUP_PREFIX)), {})[field] = tensor
    return found


def optimizer_state_from_flat(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Load what ``optimizer_state_to_flat`` produced into ``optimizer`` (matched by parameter name; the row
    slices of a fused or padded parameter put back together, padding rows 0).

    Raises ``ValueError`` when the saved parameter names differ from the optimizer's.
    """
    layouts = _optimizer_row_layouts(optimizer)
    current = optimizer.state_dict()["param_groups"]
    saved = meta["param_groups"]
    if [_canonical_names(g.get("param_names", []), layouts) for g in current] != [g["param_names"] for g in saved]:
        raise ValueError(
            "the checkpoint's optimizer parameter names differ from this model's; "
            "was it saved from a model of another architecture?"
        )
    params = {n: p for g in optimizer.param_groups for n, p in zip(g["param_names"], g["params"], strict=True)}
    name_to_index = {n: i for g in current for i, n in zip(g["params"], g["param_names"], strict=True)}
    state: dict[int, dict[str, Any]] = {}
    for name, index in name_to_index.items():
        parts = layouts.get(name, [(name, None, None)])
        fields = {k.rsplit("/", 1)[1] for k in tensors if k.rsplit("/", 1)[0] == parts[0][0]}
        for field in fields:
            pieces = [tensors[f"{part}/{field}"] for part, _, _ in parts]
            if parts[0][1] is None or not pieces[0].dim():
                state.setdefault(index, {})[field] = pieces[0]
                continue
            full = pieces[0].new_zeros(params[name].shape)
            for piece, (_, start, stop) in zip(pieces, parts, strict=True):
                full[start:stop] = piece
            state.setdefault(index, {})[field] = full
        values = meta.get("scalars", {}).get(parts[0][0])
        if values:
            state.setdefault(index, {}).update(values)
    group_tensors = _group_tensors(tensors)
    groups = []
    for i, (cur, sav) in enumerate(zip(current, saved, strict=True)):
        group = {k: (tuple(v) if k == "betas" else v) for k, v in sav.items()}
        group.update(group_tensors.get(i, {}))
        group["params"] = cur["params"]
        group["param_names"] = cur["param_names"]
        groups.append(group)
    optimizer.load_state_dict({"state": state, "param_groups": groups})


# ------------------------------------------------------------------------------------------ save and load


def file_digest(path: str, chunk_size: int = 1 << 20) -> dict[str, Any]:
    """``{"sha256": hex digest, "bytes": size}`` of a local file (streamed)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
            size += len(chunk)
    return {"sha256": digest.hexdigest(), "bytes": size}


def _write_json(path: str, value: Any) -> None:
    write_text_synced(path, strict_json.dumps(value, indent=1))


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


def _write_fix(root: str, err: BaseException, run_dir: str) -> str:
    """What to do about a checkpoint that could not be written, by cause (not always "free space")."""
    blocker = next((p for p in (run_dir, root) if os.path.exists(p) and not os.path.isdir(p)), None)
    if blocker is not None:
        return f"{blocker} is a file, not a directory: move it away and continue with --resume {run_dir}"
    code = getattr(err, "errno", None)
    if code in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"make {root} writable (or choose another --output-dir) and continue with --resume {run_dir}"
    return f"Free space on that disk and continue with --resume {run_dir}"


def checkpoints_dir_problem(run_dir: str) -> str | None:
    """Why checkpoints could not be written in ``run_dir`` at all (a file where its directory or
    ``checkpoints/`` must be), checked before training rather than at the first save; None when fine."""
    for path in (run_dir, os.path.join(run_dir, CHECKPOINTS_DIR)):
        if os.path.exists(path) and not os.path.isdir(path):
            return (
                f"{path} is a file, not a directory, so no checkpoint could be written there; move it away or "
                "choose another --output-dir"
            )
    return None


#: A BPE / Unigram tokenizer's files, copied from the shards with its ``tokenizer.json``.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def vocab_files_to_copy(vocab_file: str | None) -> list[tuple[str, str]]:
    """``(source, name in the checkpoint)`` of the shards' vocab: their ``vocab.txt`` as ``vocab.txt``, or a
    BPE / Unigram ``tokenizer.json`` with the config files beside it under their own names."""
    if vocab_file is None or not os.path.exists(vocab_file):
        return []
    if os.path.basename(vocab_file) != "tokenizer.json":
        return [(vocab_file, "vocab.txt")]
    folder = os.path.dirname(vocab_file)
    return [(os.path.join(folder, n), n) for n in _TOKENIZER_FILES if os.path.exists(os.path.join(folder, n))]


def save_checkpoint(
    run_dir: str,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    hf_config: dict | None = None,
    vocab_file: str | None = None,
    keep_last: int = KEEP_LAST,
) -> str:
    """Write ``run_dir/checkpoints/step-<step>/`` atomically and delete all but the last ``keep_last``.

    ``state`` is the JSON part (``state.json``); ``optimizer`` hyper-parameters and the sha256 and size of
    every other file (``files``) are added to it. Returns the checkpoint path. Only checkpoints of earlier
    steps are deleted, so a damaged later one that a resume skipped never costs the new one its place.

    Raises:
        CheckpointWriteError: a file could not be written (disk full, permissions); the temporary directory
            is removed first, the earlier checkpoints are untouched.
    """
    root = os.path.join(run_dir, CHECKPOINTS_DIR)
    final = os.path.join(root, checkpoint_name(step))
    tmp = os.path.join(root, staging_name("checkpoint"))
    try:
        os.makedirs(root, exist_ok=True)
        os.makedirs(tmp)
        _write_checkpoint_files(tmp, step, model, optimizer, state, hf_config, vocab_file)
        replace_directory(tmp, final)  # final exists when the same step is saved again (end of run after a save)
    except (OSError, SafetensorError) as err:  # safetensors reports a full disk as SafetensorError
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_failure(err, run_dir, final, step) from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if keep_last > 0:
        earlier = [path for s, path in list_checkpoints(root) if s <= step]
        for path in earlier[:-keep_last]:
            shutil.rmtree(path, ignore_errors=True)
    return final


def _write_checkpoint_files(
    folder: str,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    hf_config: dict | None,
    vocab_file: str | None,
) -> None:
    """A checkpoint's files in ``folder`` (the staging directory): ``model.safetensors`` (the trainable
    weights, on the CPU), ``optimizer.safetensors``, ``config.json`` when given, the shards' vocab files, and
    last ``state.json`` (``state`` with the format, ``step``, the optimizer's hyper-parameters and each other
    file's sha256 and size). Raises ``OSError`` / ``SafetensorError`` from a failed write."""
    weights = {k: v.detach().to("cpu").contiguous() for k, v in trainable_state_dict(model).items()}
    save_file(weights, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    opt_tensors, opt_meta = optimizer_state_to_flat(optimizer)
    save_file(opt_tensors, os.path.join(folder, "optimizer.safetensors"), metadata={"format": "pt"})
    for name in ("model.safetensors", "optimizer.safetensors"):
        fsync_file(os.path.join(folder, name))
        set_default_permissions(os.path.join(folder, name))
    if hf_config is not None:
        _write_json(os.path.join(folder, "config.json"), hf_config)
    for source, name in vocab_files_to_copy(vocab_file):
        shutil.copyfile(source, os.path.join(folder, name))
        fsync_file(os.path.join(folder, name))
    files = {name: file_digest(os.path.join(folder, name)) for name in sorted(os.listdir(folder))}
    _write_json(
        os.path.join(folder, "state.json"),
        {"format": CHECKPOINT_FORMAT, **state, "step": step, "optimizer": opt_meta, "files": files},
    )


def _write_failure(err: OSError | SafetensorError, run_dir: str, final: str, step: int) -> CheckpointWriteError:
    """The one-line error for checkpoint ``final`` (of ``step``) not written because of ``err``: the cause,
    whether an earlier checkpoint is intact, and what to do (``_write_fix``); its ``errno`` is ``err``'s."""
    root = os.path.join(run_dir, CHECKPOINTS_DIR)
    previous = [p for s, p in list_checkpoints(root) if s != step]
    kept = f"the previous checkpoint {previous[-1]} is intact" if previous else "no earlier checkpoint exists"
    reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    fix = _write_fix(root, err, run_dir)
    failure = CheckpointWriteError(f"checkpoint {final} not written ({reason}); {kept}. {fix}")
    failure.errno = err.errno if isinstance(err, OSError) else None
    return failure


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


_DAMAGED_HINT = "the checkpoint is damaged; resume from an earlier one"


def read_checkpoint_state(path: str) -> dict[str, Any]:
    """``state.json`` of a checkpoint directory (JSON only).

    Raises:
        CheckpointError: ``state.json`` is not valid JSON (truncated, overwritten) or not a JSON object.
        ValueError: another checkpoint format.
    """
    state_path = os.path.join(path, "state.json")
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{state_path} is not valid JSON ({err}); {_DAMAGED_HINT}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{state_path} holds a {type(state).__name__}, not a checkpoint state; {_DAMAGED_HINT}")
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}/state.json: checkpoint format {state.get('format')!r}, expected {CHECKPOINT_FORMAT}")
    return state


def _check_safetensors_header(path: str) -> None:
    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            f.keys()
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path} cannot be read ({err}); {_DAMAGED_HINT}") from None


def verify_checkpoint(path: str) -> dict[str, Any]:
    """Check a checkpoint directory against the sizes and sha256 that its ``state.json`` recorded (``files``)
    and return the state. Checkpoints written before bertprep recorded checksums get a weaker check: their
    safetensors files must open.

    Cost: one read of every file (the optimizer file is twice the model's size), about a second per GB.

    Raises:
        CheckpointError: naming the first file that is missing, has another size or another sha256, or the
            ``state.json`` that cannot be read.
    """
    state = read_checkpoint_state(path)
    files = state.get("files")
    if not isinstance(files, dict):
        for name in ("model.safetensors", "optimizer.safetensors"):
            _check_safetensors_header(os.path.join(path, name))
        return state
    for name, recorded in sorted(files.items()):
        file_path = os.path.join(path, name)
        if not os.path.isfile(file_path):
            raise CheckpointError(f"{file_path} is missing; {_DAMAGED_HINT}")
        actual = file_digest(file_path)
        if actual["bytes"] != recorded["bytes"]:
            raise CheckpointError(
                f"{file_path} has {actual['bytes']:,} bytes, {recorded['bytes']:,} when written "
                f"(truncated?); {_DAMAGED_HINT}"
            )
        if actual["sha256"] != recorded["sha256"]:
            raise CheckpointError(
                f"{file_path}: sha256 differs from the one recorded in state.json when it was "
                f"written (the bytes changed on disk); {_DAMAGED_HINT}"
            )
    return state


def load_intact_checkpoint(path: str) -> tuple[str, dict[str, Any]]:
    """``(checkpoint directory, state)`` for ``path`` after ``verify_checkpoint``.

    ``path`` names a ``step-*`` directory (that one, refused when damaged) or a run directory / its
    ``checkpoints/`` folder: then the latest checkpoint that passes the check; each damaged later one is
    logged as a warning naming the file and the checkpoint used instead.

    Raises:
        FileNotFoundError: no checkpoint at ``path``.
        CheckpointError: the checkpoint named is damaged, or every checkpoint of the run is (all listed).
    """
    if os.path.exists(os.path.join(path, "state.json")):
        return path, verify_checkpoint(path)
    for candidate in (os.path.join(path, CHECKPOINTS_DIR), path):
        found = list_checkpoints(candidate)
        if not found:
            continue
        problems: list[str] = []
        for _, checkpoint_dir in reversed(found):
            try:
                state = verify_checkpoint(checkpoint_dir)
            except CheckpointError as err:
                problems.append(str(err))
                logger.warning("%s", err)
                continue
            if problems:
                logger.warning("falling back to %s, the latest intact checkpoint of %s", checkpoint_dir, path)
            return checkpoint_dir, state
        raise CheckpointError(f"no intact checkpoint in {candidate}: " + " | ".join(problems))
    raise FileNotFoundError(f"no complete checkpoint (step-*/state.json) in {path} or {path}/{CHECKPOINTS_DIR}")


def load_model_weights(path: str, model: nn.Module) -> None:
    """Load ``path/model.safetensors`` into ``model`` strictly (``model.load_state_dict_strict``).

    Raises ``CheckpointError`` naming the file when it cannot be parsed (truncated, overwritten)."""
    file_path = os.path.join(path, "model.safetensors")
    try:
        weights = load_file(file_path, device="cpu")
    except SafetensorError as err:
        raise CheckpointError(f"{file_path} cannot be read ({err}); {_DAMAGED_HINT}") from None
    load_state_dict_strict(model, weights)


def load_optimizer_state(path: str, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load ``path/optimizer.safetensors`` (+ the hyper-parameters in ``state``) into ``optimizer``.

    Raises ``CheckpointError`` naming the file when it cannot be parsed."""
    file_path = os.path.join(path, "optimizer.safetensors")
    try:
        with safe_open(file_path, framework="pt", device="cpu") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (a safe_open handle is not iterable)
    except SafetensorError as err:
        raise CheckpointError(f"{file_path} cannot be read ({err}); {_DAMAGED_HINT}") from None
    optimizer_state_from_flat(optimizer, tensors, state["optimizer"])
