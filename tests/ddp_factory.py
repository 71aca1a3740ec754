"""Two-process DDP runs of the trainer for the tests (``torchrun --standalone --nproc_per_node=2``, gloo): shared by
the DDP tests and the objectives' tests, which import it from here rather than from another test module (a test
module is importable only where pytest has put its folder on the path).

proc = run_worker(shards, out, {"gradient_accumulation_steps": 2})   # each rank writes out/rank<N>.json
proc = run_ranks(["-m", "bertprep.cli.main", "train", ...])          # the command on 2 ranks, no torchrun
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
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


def run_ranks(argv: list[str], nproc: int = 2, timeout: float = 400) -> subprocess.CompletedProcess:
    """``python ARGV`` as ``nproc`` ranks of one process group on this machine, each with the environment
    ``torchrun --standalone`` gives it (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``: a free port, found as torchrun finds its own) and one torch thread, but
    without torchrun's own process (an interpreter importing torch: ~1.5 s of CPU a run). For tests whose
    subject is the command on several processes, not the launcher (``run_worker`` and the DDP tests use
    torchrun). A rank that fails ends the others, as torchrun ends them. Returns the ranks' stdout and stderr,
    rank after rank, and the first non-zero exit status (0 when every rank exits 0); ``subprocess.TimeoutExpired``
    past ``timeout`` seconds (the ranks killed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    common = {"WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1"}
    env = {**os.environ, **common, "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
    with contextlib.ExitStack() as stack:  # (files, not pipes: a rank blocked on a full pipe would hang them all)
        outs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in range(2 * nproc)]
        procs = []
        for rank in range(nproc):
            rank_env = {**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
            procs.append(subprocess.Popen([sys.executable, *argv], stdout=outs[2 * rank], stderr=outs[2 * rank + 1],
                                          env=rank_env))  # fmt: skip
        deadline = time.monotonic() + timeout
        try:
            while any(p.poll() is None for p in procs):
                if any(p.returncode for p in procs):
                    break  # (a failed rank: the others would wait for it in a collective)
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired([sys.executable, *argv], timeout)
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
        for f in outs:
            f.seek(0)
        texts = [f.read() for f in outs]
    code = next((p.returncode for p in procs if p.returncode), 0)
    return subprocess.CompletedProcess(argv, code, "".join(texts[0::2]), "".join(texts[1::2]))
