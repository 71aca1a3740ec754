"""Start-up of the commands: ``make-shards`` on a small file, and ``--help``, wall time and CPU time.

Each variant runs in a fresh process, in turn, ``--runs`` times; the figures are medians. CPU time is user + system
of the whole process tree (the worker processes included: ``os.wait4`` of the command, whose own children are
reaped by it), so it says what a run costs even on a loaded machine, where wall time mostly says how busy the
machine was (the load average is printed at the start and the end). Variants:

- ``make-shards``: the default on a 20 KB excerpt of the demo corpus (a small input runs in the calling
  process, ``run.in_process_args``);
- ``make-shards, worker processes``: the same command with the earlier default, a pool of worker processes on
  every core fed over Beam's gRPC (``in_process_args`` made to return ``[]``);
- ``--help``, ``train --help``, ``make-shards --help``: the option lists alone (no torch or Beam import).

Pass ``--python`` to measure another environment (e.g. one with only the base install)::

    python benchmarks/bench_startup.py --runs 5
    python benchmarks/bench_startup.py --runs 5 --python /path/to/base-venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VOCAB = Path(os.environ.get("BERTPREP_DATA", REPO.parent / "shared" / "data")) / "vocab" / "bert-base-uncased-vocab.txt"
#: The earlier default: worker processes whatever the input's size.
WORKERS = (
    "import sys\nfrom bertprep.pipeline.beam import run\nrun.in_process_args = lambda *a, **k: []\n"
    "from bertprep.cli.main import main\nsys.argv = ['bertprep', *sys.argv[1:]]\nmain()\n"
)
MAIN = "import sys\nfrom bertprep.cli.main import main\nsys.argv = ['bertprep', *sys.argv[1:]]\nmain()\n"


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one run of ``argv``; raises if it fails."""
    start = time.perf_counter()
    quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    pid = os.posix_spawn(argv[0], argv, {**os.environ, "OMP_NUM_THREADS": "1"}, file_actions=quiet)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed (run it alone to see why): {' '.join(argv)}")
    return wall, usage.ru_utime + usage.ru_stime


def variants(python: str, corpus: Path, out: Path) -> dict[str, list[str]]:
    shards = ["make-shards", "-i", str(corpus), "--vocab", str(VOCAB), "-o", str(out), "-q", "--overwrite"]
    return {
        "make-shards (20 KB)": [python, "-c", MAIN, *shards],
        "make-shards (20 KB), worker processes": [python, "-c", WORKERS, *shards],
        "--help": [python, "-c", MAIN, "--help"],
        "train --help": [python, "-c", MAIN, "train", "--help"],
        "make-shards --help": [python, "-c", MAIN, "make-shards", "--help"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the environment to measure")
    args = parser.parse_args()
    print(f"command: python {' '.join(sys.argv)}")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "excerpt.txt"
        text = (REPO / "pipeline" / "demo_corpus" / "blake-poems.txt").read_bytes()[:20_000]
        corpus.write_bytes(text[: text.rfind(b"\n") + 1])
        runs = variants(args.python, corpus, Path(tmp) / "out")
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        for _ in range(args.runs):
            for name, argv in runs.items():
                figures[name].append(timed(argv))
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(f"| command | wall s (median of {args.runs}) | CPU s, process tree (median) |")
    print("|---|---:|---:|")
    for name, values in figures.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(f"| {name} | {wall:.2f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()
