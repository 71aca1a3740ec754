"""Read back the history of an offline Weights & Biases run (``OUTPUT/wandb/offline-run-*/run-*.wandb``).

wandb (0.31) no longer ships a Python reader of its transaction log, so the tests read it here: the format is
LevelDB's log format (32 KiB blocks of records, each a 7-byte header: CRC32 (4), length (2, little-endian),
type (1: full, 2: first, 3: middle, 4: last)) after a 7-byte file header (``:W&B``, magic 0xBEE1, version),
and each record is a ``wandb.proto.wandb_internal_pb2.Record``; history rows are its ``history`` records.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

_BLOCK = 32 * 1024
_FILE_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes):
    """The records' bytes (fragments joined) of a LevelDB-format log that starts after the file header."""
    pos, pending = len(_FILE_HEADER), b""
    while pos + 7 <= len(data):
        left_in_block = _BLOCK - pos % _BLOCK
        if left_in_block < 7:  # the block's tail is padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""


def records(run_file: Path) -> list:
    """The ``wandb_internal_pb2.Record``s of a ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = Path(run_file).read_bytes()
    assert data[: len(_FILE_HEADER)] == _FILE_HEADER, f"{run_file} is not a W&B transaction log"
    out = []
    for payload in _payloads(data):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        out.append(record)
    return out


def history(run_file: Path, timeout_s: float = 30.0) -> list[dict]:
    """Every row ``run.log`` wrote to the ``.wandb`` file, as dicts (``_step`` is the step given to ``log``).

    wandb's service process writes the file; ``run.finish()`` can return before the last records are on disk,
    so this waits (up to ``timeout_s``) for the run's ``exit`` record, which comes after all its rows.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = records(run_file)
        except Exception:  # a record half-written as we read: read again
            found = []
        if any(r.WhichOneof("record_type") == "exit" for r in found) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert any(r.WhichOneof("record_type") == "exit" for r in found), f"{run_file}: the run never finished"
    rows = []
    for record in found:
        if record.WhichOneof("record_type") == "history":
            items = record.history.item
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    return rows


def run_files(output_dir: Path) -> list[Path]:
    """The offline runs' ``.wandb`` files under ``output_dir/wandb/``."""
    return sorted(Path(output_dir).glob("wandb/offline-run-*/run-*.wandb"))
