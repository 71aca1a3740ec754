"""Two-process DDP runs of the trainer for the tests (``torchrun --standalone --nproc_per_node=2``, gloo): shared by
the DDP tests and the objectives' tests, which import it from here rather than from another test module (a test
module is importable only where pytest has put its folder on the path).

proc = run_worker(shards, out, {"gradient_accumulation_steps": 2})   # each rank writes out/rank<N>.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

WORKER = textwrap.dedent(
    """
    import hashlib, json, os, sys
    import torch
    torch.set_num_threads(1)
    from bertprep.bert_model.pretrain.trainer import TrainConfig, train

    shards, out, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    result = train(TrainConfig(shards=shards, output_dir=out, preset="tiny", hidden_size=32,
                               num_attention_heads=2, batch_size=4, max_steps=4, warmup_steps=1,
                               learning_rate=1e-3, log_every=2, save_every=0, num_workers=0,
                               shuffle_buffer_size=16, device="cpu", progress=False, **extra))
    digest = hashlib.sha256()
    for name, tensor in sorted(result.model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    rank = int(os.environ["RANK"])
    stream = result.data_cursor["streams"][0]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"digest": digest.hexdigest(), "world_size": int(os.environ["WORLD_SIZE"]),
                   "epoch": stream["epoch"], "shards": stream["shards"]}, f)
    """
)


def run_worker(shards: Path, out: Path, extra: dict) -> subprocess.CompletedProcess:
    """``WORKER`` under ``torchrun --standalone --nproc_per_node=2`` (gloo, one torch thread per process).

    ``PYTHONFAULTHANDLER`` makes a rank that dies by a signal (SIGABRT from native code at exit, say) print every
    thread's Python stack into ``proc.stderr``, which the callers' failure message shows."""
    script = out.parent / "worker.py"
    script.write_text(WORKER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    return subprocess.run(
        [*cmd, str(shards), str(out), json.dumps(extra)], env=env, capture_output=True, text=True, timeout=240
    )
