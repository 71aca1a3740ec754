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

HEAVY = ("torch", "apache_beam", "pyarrow", "scipy", "tokenizers")


@pytest.mark.parametrize(
    "args,allowed",
    [
        ([], ()),
        (["train"], ()),  # before: torch (1.4 s of CPU) for the option lists of --attn-implementation and others
        (["make-shards"], ()),
        (["inspect"], ()),
        (["build-vocab"], ("tokenizers",)),
    ],
)
def test_help_imports_no_heavy_library(args, allowed):
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
