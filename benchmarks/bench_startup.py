"""Start-up of the commands: ``make-shards`` and ``build-vocab`` on a small file, ``--help``: wall and CPU time.

Each variant runs in a fresh process, in turn, ``--runs`` times; the figures are medians. CPU time is user + system
of the whole process tree (the worker processes included: ``resource.getrusage(RUSAGE_CHILDREN)`` before and after
the command, which counts every process it waited for), so it says what a run costs even on a loaded machine,
where wall time mostly says how busy the machine was (the load average is printed at the start and the end).
Variants:

- ``make-shards``: the default on a 20 KB excerpt of the demo corpus (a small input runs in the calling
  process, ``run.in_process_args``), the options a user would pass (``-i``, ``--vocab``, ``-o``);
- ``make-shards, worker processes``: the same command with the earlier default, a pool of worker processes on
  every core fed over Beam's gRPC (``in_process_args`` made to return ``[]``);
- ``original``: with ``--original DIR``, google-research/bert's ``create_pretraining_data.py`` from DIR (your
  copy, with its ``tokenization.py``; nothing of it is in this repository) on the same file and vocab, its flags
  at their defaults, with the stand-in ``tensorflow`` of ``benchmarks/tf_standin`` (as ``bench_make_shards.py``
  runs it); without ``--original`` it is skipped, and the reason printed;
- ``build-vocab``: a WordPiece vocab of 1,000 tokens on the same excerpt (``-o``, ``--vocab-size``), its local
  input listed and opened with the standard library (``readers/local_files.py``);
- ``build-vocab, local files through Beam``: the same command as before that, its input listed and opened through
  Beam's ``FileSystems``, which imports Beam (``local_files.is_beam_local`` made to return False);
- ``--help``, ``train --help``, ``finetune --help``, ``make-shards --help``: the option lists alone (no torch or
  Beam import).

``--breakdown`` then says where make-shards' seconds go: its run cut into phases (start-up and option parsing,
the settings and vocab, building the Beam pipeline, running it, publishing; medians of ``--runs``) and the
imports that cost most (``python -X importtime``, cumulative, top-level modules). Pass ``--python`` to measure
another environment (e.g. one with only the base install)::

    python benchmarks/bench_startup.py --runs 5
    python benchmarks/bench_startup.py --runs 5 --original /path/to/bert --breakdown
    python benchmarks/bench_startup.py --runs 5 --python /path/to/base-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_make_shards import original_files

REPO = Path(__file__).resolve().parent.parent
STANDIN = REPO / "benchmarks" / "tf_standin"
VOCAB = Path(os.environ.get("BERTPREP_DATA", REPO.parent / "shared" / "data")) / "vocab" / "bert-base-uncased-vocab.txt"
#: The earlier default: worker processes whatever the input's size.
WORKERS = (
    "import sys\nfrom bertprep.pipeline.beam import run\nrun.in_process_args = lambda *a, **k: []\n"
    "from bertprep.cli.main import main\nsys.argv = ['bertprep', *sys.argv[1:]]\nmain()\n"
)
MAIN = "import sys\nfrom bertprep.cli.main import main\nsys.argv = ['bertprep', *sys.argv[1:]]\nmain()\n"
#: The earlier way of reading local inputs: through Beam's FileSystems, as a remote path is.
THROUGH_BEAM = (
    "import sys\nfrom bertprep.pipeline.readers import local_files\nlocal_files.is_beam_local = lambda path: False\n"
    "from bertprep.cli.main import main\nsys.argv = ['bertprep', *sys.argv[1:]]\nmain()\n"
)
#: make-shards with a clock (monotonic, comparable across processes) and the CPU time read at each phase's edges;
#: the marks go to the JSON file named by the first argument.
PHASES = """
import json, sys, time
marks = []
def mark(name):
    marks.append((name, time.perf_counter(), time.process_time()))
def clocked(owner, attr, name):
    real = getattr(owner, attr)
    def call(*args, **kwargs):
        mark(name + " start")
        try:
            return real(*args, **kwargs)
        finally:
            mark(name + " end")
    setattr(owner, attr, call)
import apache_beam as beam
from bertprep.cli import shards_options
from bertprep.cli.main import main
from bertprep.pipeline.beam import run
clocked(shards_options, "shards_config", "config")
clocked(run, "build_pipeline", "build")
clocked(beam.Pipeline, "__exit__", "run")
out, sys.argv = sys.argv[1], ["bertprep", *sys.argv[2:]]
try:
    main()
finally:
    with open(out, "w") as f:
        json.dump(marks, f)
"""
#: (label, start mark, end mark); None is the process's start or end.
PHASE_SPANS = (
    ("interpreter, imports (Beam's included), option parsing", None, "config start"),
    ("settings and vocab (shards_options.shards_config)", "config start", "config end"),
    ("input and output checks, runner set-up", "config end", "build start"),
    ("building the pipeline (graph.build_pipeline)", "build start", "build end"),
    ("running it (Beam's in-process FnApiRunner)", "run start", "run end"),
    ("publishing, summary, exit", "run end", None),
)


def timed(argv: list[str], env: dict[str, str] | None = None, stderr: str = os.devnull) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one run of ``argv``; raises if it fails."""
    quiet = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
    quiet.append((os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, environment, file_actions=quiet)
    _, status = os.waitpid(pid, 0)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed (run it alone to see why): {' '.join(argv)}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def shards_args(corpus: Path, out: Path) -> list[str]:
    return ["make-shards", "-i", str(corpus), "--vocab", str(VOCAB), "-o", str(out), "-q", "--overwrite"]


def original_variant(original: Path | None, corpus: Path, out: Path) -> tuple[list[str], dict[str, str]] | str:
    """The original generator's command and environment, or the reason it is skipped."""
    if original is None:
        return (
            "skipped: no --original DIR given (google-research/bert's create_pretraining_data.py and "
            "tokenization.py are not part of this repository)"
        )
    try:
        script = original_files(original)
    except SystemExit as err:
        return f"skipped: {err}"
    argv = [
        sys.executable,
        str(script),
        f"--input_file={corpus}",
        f"--output_file={out / 'original.jsonl'}",
        f"--vocab_file={VOCAB}",
    ]
    return argv, {"PYTHONPATH": str(STANDIN)}  # the stand-in tensorflow, for this run only


def variants(python: str, corpus: Path, out: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    shards = shards_args(corpus, out / "shards")
    vocab = ["build-vocab", str(corpus), "-o", str(out / "vocab"), "--vocab-size", "1000", "-q", "--overwrite"]
    return {
        "make-shards (20 KB)": ([python, "-c", MAIN, *shards], {}),
        "make-shards (20 KB), worker processes": ([python, "-c", WORKERS, *shards], {}),
        "build-vocab (20 KB)": ([python, "-c", MAIN, *vocab], {}),
        "build-vocab (20 KB), local files through Beam (before)": ([python, "-c", THROUGH_BEAM, *vocab], {}),
        "--help": ([python, "-c", MAIN, "--help"], {}),
        "train --help": ([python, "-c", MAIN, "train", "--help"], {}),
        "finetune --help": ([python, "-c", MAIN, "finetune", "--help"], {}),
        "make-shards --help": ([python, "-c", MAIN, "make-shards", "--help"], {}),
    }


def print_table(
    figures: dict[str, list[tuple[float, float]]], runs: int, what: str = "command", cpu: str = "CPU s, process tree"
) -> None:
    print(f"| {what} | wall s (median of {runs}) | {cpu} (median) |")
    print("|---|---:|---:|")
    for name, values in figures.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(f"| {name} | {wall:.2f} | {cpu:.2f} |")


def phases(python: str, corpus: Path, tmp: Path, runs: int) -> None:
    """make-shards' run cut into ``PHASE_SPANS``: wall and CPU seconds of each, medians of ``runs``."""
    spans: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in PHASE_SPANS}
    marks_file = tmp / "marks.json"
    for _ in range(runs):
        start = time.perf_counter()
        wall, cpu = timed([python, "-c", PHASES, str(marks_file), *shards_args(corpus, tmp / "phases")])
        end = start + wall
        marks = {name: (clock, process) for name, clock, process in json.loads(marks_file.read_text())}
        for label, first, last in PHASE_SPANS:
            t0, c0 = marks[first] if first else (start, 0.0)
            t1, c1 = marks[last] if last else (end, cpu)
            spans[label].append((t1 - t0, c1 - c0))
    print(f"\nWhere make-shards (20 KB) spends its time (medians of {runs}; in one process, so CPU is that process's):")
    print_table(spans, runs, "phase", "CPU s, the process")


def top_imports(python: str, corpus: Path, tmp: Path, count: int = 12) -> None:
    """The top-level imports of one make-shards run by cumulative time (``-X importtime``)."""
    log = tmp / "importtime.txt"
    timed([python, "-X", "importtime", "-c", MAIN, *shards_args(corpus, tmp / "imports")], stderr=str(log))
    rows = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if cumulative.strip().isdigit() and not name.startswith("  "):  # two spaces deeper: a nested import
            rows.append((int(cumulative), name.strip()))
    total = sum(us for us, _ in rows)
    print(f"\nImports of one make-shards run (python -X importtime; top-level, cumulative): {total / 1e6:.2f} s in all")
    print("| module | cumulative s |")
    print("|---|---:|")
    for us, name in sorted(rows, reverse=True)[:count]:
        print(f"| {name} | {us / 1e6:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", default=sys.executable, help="the interpreter of the environment to measure")
    parser.add_argument(
        "--original",
        type=Path,
        default=None,
        help="a folder with your copy of google-research/bert's create_pretraining_data.py and tokenization.py",
    )
    parser.add_argument("--breakdown", action="store_true", help="also: make-shards' phases and top imports")
    args = parser.parse_args()
    print(f"command: python {' '.join(sys.argv)}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        corpus = tmp / "excerpt.txt"
        text = (REPO / "pipeline" / "demo_corpus" / "blake-poems.txt").read_bytes()[:20_000]
        corpus.write_bytes(text[: text.rfind(b"\n") + 1])
        runs = variants(args.python, corpus, tmp)
        original = original_variant(args.original, corpus, tmp)
        if isinstance(original, str):
            print(f"original create_pretraining_data.py: {original}")
        else:
            runs = {"original create_pretraining_data.py (20 KB)": original, **runs}
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        for _ in range(args.runs):
            for name, (argv, env) in runs.items():
                figures[name].append(timed(argv, env))
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        print_table(figures, args.runs)
        if args.breakdown:
            phases(args.python, corpus, tmp, args.runs)
            top_imports(args.python, corpus, tmp)
        print(f"load average at end of all: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
