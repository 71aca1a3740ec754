"""Start-up where it is ours: ``--help`` imports neither torch nor Beam where the command does not need them, and a
small make-shards input runs in the calling process instead of starting worker processes
(``benchmarks/bench_startup.py`` measures both)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.pipeline.beam import run
from pipeline_factory import FILES, VOCAB

HEAVY = ("torch", "transformers", "sentence_transformers", "apache_beam", "pyarrow", "scipy", "sklearn", "tokenizers")
#: What a command's --help may import of HEAVY (build-vocab's option lists come from the tokenizers library).
ALLOWED = {"build-vocab": ("tokenizers",)}


def every_command() -> list[list[str]]:
    """The group, each command and each of evaluate's subcommands (a command added later is checked too)."""
    from bertprep.cli.evaluate import evaluate
    from bertprep.cli.main import _COMMANDS

    return [[], *([name] for name in sorted(_COMMANDS)), *(["evaluate", sub] for sub in sorted(evaluate.commands))]


@pytest.mark.parametrize("args", every_command(), ids=lambda args: " ".join(args) or "bertprep")
def test_help_imports_no_heavy_library(args):
    """In a fresh process. Before: train --help imported torch (1.4 s of CPU) for its option lists; finetune,
    evaluate (and its subcommands), predict, extract-features and fill-mask --help imported torch, scipy and
    scikit-learn (1.2 to 2.5 s of CPU, 1,200 to 2,500 modules) for their settings' defaults."""
    allowed = ALLOWED.get(args[0] if args else "", ())
    code = (
        "import sys\nfrom bertprep.cli.main import main\n"
        f"sys.argv = ['bertprep', *{args!r}, '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout
    loaded = ast.literal_eval(result.stdout.strip().splitlines()[-1])  # the list printed last
    assert set(loaded) <= set(allowed), f"bertprep {' '.join(args)} --help imported {loaded}"


#: Runs (arguments that pass click's checks) of the commands whose work needs torch, which they import in their
#: bodies; M is a folder, F a file. (evaluate glue / squad: scipy and scikit-learn load first, 6 s.)
NEEDS_TORCH = [
    ["fill-mask", "-m", "M", "the [MASK] ."],
    ["predict", "-m", "M", "-i", "F", "-o", "OUT/p.tsv"],
    ["extract-features", "-m", "M", "-i", "F", "-o", "OUT/f.arrow"],
    ["finetune", "--task", "glue", "--train-file", "F", "--model", "M", "-o", "OUT"],
    ["finetune", "--task", "retrieval", "--train-file", "F", "--model", "M", "-o", "OUT"],
    ["evaluate", "retrieval", "-m", "M", "--data", "M", "-o", "OUT"],
]


@pytest.mark.parametrize("args", NEEDS_TORCH, ids=lambda args: " ".join(args[:3]))
def test_a_missing_package_imported_by_a_command_body_is_one_line(tmp_path, args):
    """The work is imported when the command runs (not when its module loads, so that --help needs no torch):
    torch missing there gets the group's one line naming the extra, as it did at load time, not a traceback."""
    (tmp_path / "M").mkdir()
    (tmp_path / "F").write_text("a\tb\n", encoding="utf-8")
    argv = [str(tmp_path / a) if a in ("M", "F") or a.startswith("OUT") else a for a in args]
    code = (
        "import sys\n"
        "class NoTorch:  # as if torch were not installed\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "from bertprep.cli.main import main\n"
        f"sys.argv = ['bertprep', *{argv!r}]\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"Error: '{args[0]}' needs the package 'torch', which is not installed (pip install 'bertprep[finetune]')"
    ]
    assert not (tmp_path / "OUT").exists()


def test_a_small_input_runs_in_process_a_large_one_on_worker_processes(tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("One sentence.\nAnother one.\n\nA second document.\n", encoding="utf-8")
    assert run.in_process_args([str(small)], dupe_factor=10) == ["--direct_num_workers=1"]
    assert run.in_process_args([str(tmp_path)], dupe_factor=10) == ["--direct_num_workers=1"]  # a folder
    assert run.in_process_args([str(tmp_path / "*.txt")], dupe_factor=10) == ["--direct_num_workers=1"]
    large = tmp_path / "large.txt"
    with open(large, "wb") as f:  # sparse: the size counts, not the bytes on disk
        f.truncate(run.IN_PROCESS_MAX_WORK // 10 + 1)
    assert run.in_process_args([str(large)], dupe_factor=10) == []
    assert run.in_process_args([str(large)], dupe_factor=1) == ["--direct_num_workers=1"]  # the work: size x dupe
    assert run.in_process_args([str(small), str(large)], dupe_factor=10) == []
    assert run.in_process_args(["gs://bucket/corpus/*.txt"], dupe_factor=1) == []  # remote: the default
    assert run.in_process_args([str(tmp_path / "missing.txt")], dupe_factor=1) == []  # reported by the run
    assert run.in_process_args([], dupe_factor=1) == []


def test_make_shards_on_a_small_input_starts_no_worker_process(tmp_path, monkeypatch):
    """Before: two worker processes were forked and fed over gRPC for a file of kilobytes (2.4 s of CPU on the
    base install against 1.7 s in process); the shards are the same bytes on any number of workers
    (tests/pipeline/instances/test_buckets.py)."""
    from bertprep.pipeline.beam import warm_workers

    started = []
    monkeypatch.setattr(warm_workers, "start", lambda size: started.append(size))
    args = ["make-shards", "-i", ",".join(FILES), "--vocab", VOCAB, "-o", str(tmp_path / "out"), "-q"]
    result = CliRunner().invoke(cli, [*args, "--max-seq-length", "64", "--dupe-factor", "2"])
    assert result.exit_code == 0, result.output
    assert started == [] and (tmp_path / "out" / "manifest.json").is_file()


def test_a_stop_raised_in_an_in_process_step_keeps_its_one_line():
    """In process, Beam re-raised the stop from inside a DoFn as a new exception whose line ended in " [while
    running 'ReadDocuments/...']" (seen on a Ctrl-C of a small run, which now runs in process)."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from bertprep.pipeline.beam.session import Interrupted

    def stop(element):
        raise Interrupted("make-shards stopped by SIGINT: nothing was published")

    with pytest.raises(Interrupted) as caught, beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = pipeline | beam.Create([1]) | "Stop" >> beam.Map(stop)
    assert str(caught.value) == "make-shards stopped by SIGINT: nothing was published"
