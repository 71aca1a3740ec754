"""Fault injection, round three, for make-shards and build-vocab ("nothing lost, nothing hangs").

Each test puts the pipeline where it used to hang, print a raw traceback, accept a bad input silently or
write where the user did not ask, and asserts the bound in time, the exit status, the one line naming the
file or option and what to do (with and without ``-q``), and that nothing was written. Subprocess tests run
the real CLI as a user's shell would (the default local runner forks its warm workers only there).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from conftest import FIXTURES

PIPELINE = FIXTURES / "pipeline"
VOCAB = PIPELINE / "vocab.txt"
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def bertprep(*args, timeout: float = 120, cwd=None, prefix=("-m", "bertprep.cli.main")) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, bounded in time (``prefix``: a runner script instead of the module)."""
    return subprocess.run(
        [sys.executable, *prefix, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=ENV
    )


def one_line(output: str, start: str = "Error: ") -> str:
    """The one line starting with ``start`` of a failed run's output (asserting no traceback was printed)."""
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    lines = [line for line in output.splitlines() if line.startswith(start)]
    assert len(lines) == 1, output
    return lines[0]


def make_shards(*args, quiet: bool = True):
    """make-shards in this process (one in-memory worker)."""
    extra = ["-q"] if quiet else []
    return CliRunner().invoke(
        cli, ["make-shards", "--vocab", str(VOCAB), "--dupe-factor", "1", *extra, *map(str, args), *IN_PROCESS]
    )


# ----------------------------------------------------------------- item 5: one line, with and without -q


def _arrow_dataset(path: Path) -> Path:
    """A Hugging Face ``save_to_disk``-style file (Arrow IPC stream) with an int column and no ``text``."""
    import pyarrow as pa

    table = pa.table({"id": [1, 2], "content": ["The river rose.", "The bridge closed."]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return path


@pytest.mark.parametrize("case", ["nul-byte", "hf-no-text-column"])
def test_a_user_error_in_a_worker_is_one_line_without_quiet(tmp_path, case):
    """Before: without -q, the local runner's workers printed Beam's traceback of the failed bundle (83-97
    lines, 2-3 tracebacks) above the one-line error."""
    if case == "nul-byte":
        data = tmp_path / "nul.txt"
        data.write_bytes(b"hello world\x00 this is text\n\nmore text here.\n")
        extra, named = [], f"{data}: looks like a binary file (NUL byte at offset 11)"
    else:
        data = _arrow_dataset(tmp_path / "data-00000-of-00001.arrow")
        extra, named = ["--input-format", "hf"], "the dataset has no column 'text' (its columns: id, content)"
    done = bertprep("make-shards", "-i", data, *extra, "--vocab", VOCAB, "-o", tmp_path / "out", "--dupe-factor", 1)
    assert done.returncode == 1
    assert named in one_line(done.stderr)
    assert not (tmp_path / "out").exists()


def _group_sigint(args, marker: str, delay: float) -> tuple[int, str, float]:
    """Run ``bertprep ARGS`` in its own process group; once ``marker`` is printed (and ``delay`` s later) send
    SIGINT to the group, as a terminal's Ctrl-C does. Returns (status, output, seconds to exit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bertprep.cli.main", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while not any(marker in line for line in lines):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        time.sleep(delay)
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        status = proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(5)
    return status, "".join(lines), took


def _corpus(tmp_path: Path, copies: int = 15) -> Path:
    big = tmp_path / "big.txt"
    text = (PIPELINE / "a.txt").read_bytes() + b"\n\n" + (PIPELINE / "b.txt").read_bytes() + b"\n\n"
    big.write_bytes(text * copies)
    return big


@pytest.mark.slow  # a real run, stopped within seconds of its start
def test_ctrl_c_while_the_local_workers_run_prints_no_worker_traceback(tmp_path):
    """Before: without -q a Ctrl-C to the process group printed two `KeyboardInterrupt` tracebacks of the
    workers' launchers (`File "<string>", line 23`) above make-shards' line.

    The signal goes out the moment a worker logs that it reads the input ("input format"), and the corpus holds
    about a minute of work, so the run is still going whatever the machine's load. (A signal sent after a run
    has finished finds Python's own handler back and ends the process by SIGINT, status -2, which a shell
    reports as 130 too: right for a Ctrl-C that comes after the output is published, but it would not test
    the workers. A fixed delay after the marker let a 2-second run finish first on a busy machine.)"""
    status, output, took = _group_sigint(
        ["make-shards", "-i", _corpus(tmp_path, copies=200), "--vocab", VOCAB, "-o", tmp_path / "out"],
        "input format",
        0.0,
    )
    assert "Wrote " not in output, "the run finished before the signal: " + output
    assert status == 130 and took < 10, output
    assert "make-shards stopped by SIGINT" in one_line(output, "make-shards stopped")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.slow  # a local Dask cluster, started and stopped
def test_ctrl_c_on_a_local_dask_cluster_ends_at_once_with_one_line(tmp_path):
    """Before: 12 tracebacks. Once they were gone, a probe stopped 10 s into the run still ended by the watchdog,
    with a second line: distributed's exit hook (``close_clusters``) was closing the cluster the stopped run had
    left open. The stopped run now closes it itself, for at most ``STOP_CLOSE_TIMEOUT_S``."""
    status, output, took = _group_sigint(
        ["make-shards", "-i", _corpus(tmp_path), "--vocab", VOCAB, "-o", tmp_path / "out", "--dupe-factor", 40,
         "--runner=DaskRunner"],
        "Dask runner:",
        4.0,
    )  # fmt: skip
    assert status == 130 and took < 5, (took, output)
    line = one_line(output, "make-shards stopped")
    assert line.startswith("make-shards stopped by SIGINT: nothing was published, the output directory is as it was")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


_WITHOUT_BLINGFIRE = ["-c", "import sys; sys.modules['blingfire'] = None; from bertprep.cli.main import main; "
                      "sys.argv = ['bertprep', *sys.argv[1:]]; main()"]  # fmt: skip


@pytest.mark.parametrize("command", ["make-shards", "make-shards -q", "build-vocab"])
def test_a_segmenter_whose_package_is_missing_is_one_line(tmp_path, command):
    """Before: `--segmenter blingfire` without blingfire failed in every worker (373 lines, 12 tracebacks; 169
    with -q; build-vocab 54); the docs promised one line naming the extra."""
    name, *flags = command.split()
    out = tmp_path / "out"
    if name == "make-shards":
        args = [name, *flags, "-i", PIPELINE / "a.txt", "--vocab", VOCAB, "-o", out, "--dupe-factor", 1]
    else:
        args = [name, PIPELINE / "a.txt", "-o", out]
    done = bertprep(*args, "--input-format", "text", "--segmenter", "blingfire", prefix=_WITHOUT_BLINGFIRE)
    assert done.returncode == 1
    line = one_line(done.stdout + done.stderr)
    assert "segmenter 'blingfire' (--segmenter) needs the package 'blingfire'" in line
    assert "pip install 'bertprep[fast]'" in line and "leave --segmenter out" in line
    assert not out.exists()


# ------------------------------------------------------------------------------- items 4, 5: Dask, one line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dask_address_that_is_not_one_is_one_line(tmp_path):
    """Before: `--dask_client_address=not-an-address` ended in distributed's 89-line ValueError traceback."""
    pytest.importorskip("distributed")
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--runner=DaskRunner",
                         "--dask_client_address=not-an-address")  # fmt: skip
    assert result.exit_code == 1, result.output
    line = one_line(result.output)
    assert "--dask_client_address not-an-address: not a Dask scheduler address" in line
    assert "tcp://HOST:PORT" in line
    assert not (tmp_path / "out").exists()


def test_a_scheduler_without_workers_is_named_after_the_connection_timeout(tmp_path):
    """Before: a scheduler no worker joined took the tasks and the run waited for ever, without a word (here
    the subprocess's timeout would end it)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        start = time.monotonic()
        done = bertprep("make-shards", "-i", PIPELINE / "a.txt", "--vocab", VOCAB, "-o", tmp_path / "out", "-q",
                        "--runner=DaskRunner", f"--dask_client_address={address}", "--dask_connection_timeout=2",
                        timeout=60)  # fmt: skip
        took = time.monotonic() - start
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert f"no Dask worker joined the scheduler at {address} within 2 s" in line
    assert f"`dask worker {address}`" in line
    assert took < 40
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _kill_when_started(scheduler: subprocess.Popen, started: Path, killed: list, timeout: float = 240) -> None:
    """Kill ``scheduler`` as soon as the file ``started`` exists (a task runs on a worker), or after ``timeout``;
    appends the ``time.monotonic()`` of the kill to ``killed``."""
    deadline = time.monotonic() + timeout
    while not started.exists() and time.monotonic() < deadline and scheduler.poll() is None:
        time.sleep(0.05)
    scheduler.kill()
    killed.append(time.monotonic())


@pytest.mark.slow  # a scheduler and a worker process (about 10 s)
def test_a_scheduler_killed_mid_run_is_named(tmp_path):
    """Before: the futures ended cancelled, distributed logged a CancelledError traceback, and the run went on
    to read a manifest that was never written ("No such file or directory (.../manifest.json)")."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam import dask_runner as dr

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    log = open(tmp_path / "cluster.log", "w")  # noqa: SIM115 (the cluster's output; closed in the finally)
    scheduler = subprocess.Popen([dask, "scheduler", "--port", str(port), "--no-dashboard"], stdout=log, stderr=log)
    worker = None
    started, killed = tmp_path / "started", []  # a task writes `started` when it runs on the worker
    try:
        worker = subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard"], stdout=log,
                                  stderr=log)  # fmt: skip
        # The scheduler dies once the worker has joined and runs the tasks (16 x 0.5 s): the test waits for that
        # state, not for a fixed time (a 6 s timer killed it before the worker had joined on a busy machine).
        killer = threading.Thread(target=_kill_when_started, args=(scheduler, started, killed), daemon=True)
        killer.start()
        pipeline = beam.Pipeline(runner=dr.BertprepDaskRunner(), options=PipelineOptions([
            "--dask_client_address", address, "--dask_connection_timeout", "120"]))  # fmt: skip
        # (a lambda: pickled by value, as the Dask worker cannot import this test module)
        mark = str(started)
        _ = (pipeline | beam.Create(list(range(16)))
             | beam.Map(lambda x: open(mark, "a").close() or time.sleep(0.5) or x) | beam.Map(print))  # fmt: skip
        with pytest.raises(dr.DaskSchedulerLost) as lost:
            pipeline.run().wait_until_finish(duration=90_000)
        named = time.monotonic()
        assert started.exists() and killed, "the scheduler was not killed mid-run"  # the state the test is about
        assert named - killed[0] < 60
    finally:
        for proc in (scheduler, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait()
        log.close()
    message = str(lost.value)
    assert f"the Dask scheduler at {address} went away during the run" in message
    assert "nothing was published" in message and "\n" not in message


_GC_CALLBACK_SIGINT = r"""
import gc, os, signal, sys, time
from bertprep.pipeline.beam import session
stop = session._StopOnSignal()
stop.install()
fired = []
def callback(phase, info):
    if phase == "start" and not fired:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs at the next line: inside this callback
        fired.append(True)
gc.callbacks.append(callback)
try:
    gc.collect()
    time.sleep(2)
    print("not interrupted", flush=True)
except session.Interrupted as err:
    print("interrupted:", err, flush=True)
os._exit(0)
"""


def test_a_stop_signal_inside_a_gc_callback_still_stops_the_run():
    """Before: a Ctrl-C that arrived while a garbage-collector callback ran (distributed's, in a local Dask
    cluster's scheduler) raised there; Python printed it as "Exception ignored" and went on, and the run
    ended 10 s later by the watchdog, with 13 tracebacks."""
    done = subprocess.run([sys.executable, "-c", _GC_CALLBACK_SIGINT], capture_output=True, text=True, timeout=60,
                          env=ENV)  # fmt: skip
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith("interrupted: make-shards stopped by SIGINT"), done.stdout


_AT_FORK_SIGINT = r"""
import os, signal, sys, time
from bertprep.pipeline.beam import session
stop = session._StopOnSignal()
stop.install()
fired = []
def after_fork():
    if not fired:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs at the next line: inside this at-fork hook
        fired.append(True)
os.register_at_fork(after_in_parent=after_fork)
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(2)
    print("not interrupted", flush=True)
except session.Interrupted as err:
    print("interrupted:", err, flush=True)
os._exit(0)
"""


def test_a_stop_signal_inside_an_at_fork_hook_still_stops_the_run():
    """Before: a Ctrl-C that arrived while logging's at-fork hook ran in the parent (``_releaseLock``, as Beam
    forks its workers) was printed as "Exception ignored in: <function _releaseLock>" with its traceback,
    above the one line."""
    done = subprocess.run([sys.executable, "-c", _AT_FORK_SIGINT], capture_output=True, text=True, timeout=60,
                          env=ENV)  # fmt: skip
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith("interrupted: make-shards stopped by SIGINT"), done.stdout


_KILL_CHILDREN = r"""
import multiprocessing.resource_tracker as rt, os, subprocess, sys, time
rt.ensure_running()
tracker = rt._resource_tracker._pid
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
from bertprep.pipeline.beam import session
session._kill_children()
child.wait(timeout=10)
time.sleep(0.5)
print("spared" if os.waitpid(tracker, os.WNOHANG) == (0, 0) else "killed", child.returncode)  # (0, 0): running
"""


def test_stopping_the_workers_spares_the_resource_tracker():
    """Before: a stop killed every descendant, multiprocessing's resource tracker too; the next shared-memory
    release started a new one, which printed a KeyError traceback per name (12 in a stopped Dask run)."""
    done = subprocess.run([sys.executable, "-c", _KILL_CHILDREN], capture_output=True, text=True, timeout=60, env=ENV)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"spared {-signal.SIGKILL}"


# --------------------------------------------------------------------------------------- item 4: a floor


def test_split_bytes_below_the_floor_is_refused(tmp_path):
    """Before: `--split-bytes 1` on a 400 KB file planned 400,000 ranges and ran on."""
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--split-bytes", "1")
    assert result.exit_code == 2
    line = one_line(result.output)
    assert "Invalid value for '--split-bytes': 1 bytes per range is below the floor of 1,048,576 (1 MiB)" in line
    assert "or 0 to read every file whole" in line
    assert not (tmp_path / "out").exists()
    assert make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "ok", "--split-bytes", "0").exit_code == 0


# ------------------------------------------------------------------------------ items 5, 7: a wiki index


@pytest.fixture
def dump(shared_data, tmp_path) -> tuple[Path, Path]:
    """A multistream dump of a few streams and its index (tests/pipeline/readers/test_ranges.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "readers"))
    from test_ranges import multistream_dump

    return multistream_dump(shared_data / "wikipedia" / "enwiki-table-markup.xml.bz2", tmp_path, copies=3)


def test_an_index_holding_garbage_is_named(dump):
    """Before: a ValueError traceback (`invalid literal for int() with base 10: b'this is not an index'`)."""
    import bz2

    from bertprep.pipeline.readers import InputError
    from bertprep.pipeline.readers.ranges import file_ranges

    path, index = dump
    index.write_bytes(bz2.compress(b"this is not an index\n"))
    with pytest.raises(InputError) as err:
        file_ranges(str(path), path.stat().st_size, 4096)
    assert f"{index}:1: 'this is not an index' is not a multistream index line (offset:page_id:title)" in str(err.value)
    assert "move it away to read the dump whole" in str(err.value)


def test_an_index_of_another_dump_is_named_not_the_dump(dump):
    """Before: offsets shifted by 7 bytes (the dump intact) failed in a worker as "truncated or corrupt ...
    re-download it", blaming the dump."""
    import bz2

    from bertprep.pipeline.readers import InputError
    from bertprep.pipeline.readers.ranges import file_ranges

    path, index = dump
    lines = bz2.decompress(index.read_bytes()).decode().splitlines()
    shifted = [f"{int(o) + 7}:{rest}" for o, rest in (line.split(":", 1) for line in lines)]
    index.write_bytes(bz2.compress(("\n".join(shifted) + "\n").encode()))
    with pytest.raises(InputError) as err:
        file_ranges(str(path), path.stat().st_size, 4096)
    message = str(err.value)
    assert f"{index}: offset " in message and f"is not the start of a bz2 stream of {path}" in message
    assert "this index does not belong to that dump" in message and "re-download" not in message


# ---------------------------------------------------------------------------- items 5, 6, 8: decontamination


@pytest.mark.parametrize("case", ["missing", "folder", "binary"])
def test_a_decontaminate_file_that_is_no_text_file_is_refused(tmp_path, case):
    """Before: a missing file or a folder failed in a worker (87 lines, 3 tracebacks without -q); a binary file
    was read as "120 texts" of replacement characters."""
    target = {"missing": tmp_path / "dev.tsv", "folder": tmp_path, "binary": tmp_path / "eval.bin"}[case]
    if case == "binary":
        target.write_bytes(bytes(range(256)) * 12)
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--decontaminate", target, quiet=False)
    assert result.exit_code == 1, result.output
    line = one_line(result.output)
    expected = {
        "missing": f"--decontaminate {target}: no such file; check the path",
        "folder": f"--decontaminate {target} is a directory; give the evaluation files themselves",
        "binary": f"--decontaminate {target}: looks like a binary file (NUL byte at offset 0), not evaluation texts",
    }[case]
    assert expected in line
    assert not (tmp_path / "out").exists()


def test_a_headerless_cola_tsv_counts_its_sentences_only(tmp_path):
    """Before: without a header every column was a text column: CoLA's source, label and mark columns counted
    as 1,743 "texts" for 527 rows (here 7 for 2)."""
    cola = tmp_path / "in_domain_dev.tsv"
    cola.write_text("gj04\t1\t\tOur friends will not buy this analysis, let alone the next one we propose.\n"
                    "gj04\t0\t*\tThey drank the pub dry and then they drank the next one too.\n")  # fmt: skip
    from bertprep.pipeline.beam.decontamination import evaluation_texts

    fmt, texts = evaluation_texts(str(cola))
    assert fmt == "glue-tsv" and texts == [
        "Our friends will not buy this analysis, let alone the next one we propose.",
        "They drank the pub dry and then they drank the next one too.",
    ]


def test_the_decontaminate_ngram_help_says_short_texts_match_whole():
    """Before: the help said texts shorter than n words "are not matched"; they are matched whole from 8 words
    (decontamination.MIN_WORDS, as docs/make-shards.md says)."""
    from bertprep.pipeline.beam.decontamination import MIN_WORDS

    result = CliRunner().invoke(cli, ["make-shards", "--help"])
    text = " ".join(result.output.split())
    assert "are not matched" not in text
    assert f"An evaluation text shorter than this is matched whole when it has at least {MIN_WORDS} words" in text


# --------------------------------------------------------------------------- items 5, 6: options and a split


def test_every_document_held_out_names_the_eval_fraction(tmp_path):
    """Before: "no instances were made: every document was empty or skipped" (and a traceback without -q)."""
    done = bertprep("make-shards", "-i", PIPELINE / "a.txt", "--vocab", VOCAB, "-o", tmp_path / "out",
                    "--dupe-factor", 1, "--eval-fraction", 0.99)  # fmt: skip
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "no training instances were made: --eval-fraction 0.99 held out every document that makes one" in line
    assert "empty or skipped" not in line and "lower --eval-fraction" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "spec,expected",
    [
        ({"sources": [{"name": "a", "inputs": "A"}], "weights": {"a": 3}}, "unknown key 'weights' at the top level"),
        ({"sources": [{"name": "a", "inputs": "A", "wieght": 2}]},
         "unknown key 'wieght' in source 1 ('a'); did you mean 'weight'?"),
        ({"sources": []}, '"sources" is empty; list at least one source'),
    ],
)  # fmt: skip
def test_a_mixture_file_with_unknown_keys_or_no_source_is_refused(tmp_path, spec, expected):
    """Before: unknown keys were ignored (a typo's weight silently 1), and no source made shards of the bundled
    demo corpus."""
    spec = json.loads(json.dumps(spec).replace('"A"', json.dumps(str(PIPELINE / "a.txt"))))
    mixture = tmp_path / "mixture.json"
    mixture.write_text(json.dumps(spec))
    result = make_shards("--mixture", mixture, "-o", tmp_path / "out")
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert f"Invalid value for --mixture: {mixture}: {expected}" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "options,expected",
    [
        (["--dedup", "exact", "--dedup-threshold", "0.5"],
         "Warning: --dedup-threshold is used by --dedup minhash only; with --dedup exact it has no effect"),
        (["--masked-lm-prob", "0.3"],
         "Warning: --max-predictions-per-seq 20 caps the masked word pieces of a full instance at 16.0%, below "
         "--masked-lm-prob 0.3; raise it to about 38"),
    ],
)  # fmt: skip
def test_an_option_that_does_nothing_or_is_capped_is_warned_about(tmp_path, options, expected):
    """Before: both ran without a word (0.3 at 128 tokens under the default cap of 20 masked 15.8%)."""
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", *options, quiet=False)
    assert result.exit_code == 0, result.output
    assert expected in result.output
    assert (tmp_path / "out" / "manifest.json").exists()


def test_the_default_options_warn_about_nothing(tmp_path):
    """The same checks stay silent at the defaults (128 tokens, 0.15, a cap of 20: 19 masked)."""
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", quiet=False)
    assert result.exit_code == 0 and "Warning" not in result.output, result.output


def test_a_cased_vocab_txt_alone_is_refused_under_the_default_lower_casing(tmp_path):
    """Before: a cased vocab.txt without its tokenizer.json (nothing records how it was built) got a warning and
    lower-cased text anyway. Now the run needs the casing given; either flag is taken."""
    cased = tmp_path / "vocab.txt"
    tokens = VOCAB.read_text(encoding="utf-8").splitlines()
    cased.write_text("\n".join(tokens + [t.capitalize() for t in tokens if t.isalpha() and t.islower()][:40]) + "\n")
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--vocab", cased)
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert "Invalid value for --vocab" in line and "a cased vocab" in line and "pass --no-do-lower-case" in line
    assert f"{cased} alone does not record how it was built" in line
    assert not (tmp_path / "out").exists()
    for flag in ("--no-do-lower-case", "--do-lower-case"):
        result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / flag, "--vocab", cased, flag)
        assert result.exit_code == 0, result.output


# ------------------------------------------------------------------------------- item 7: bytes and paths


def test_reader_counters_are_written_sorted_whatever_the_merge_order():
    """Before: statistics.formats (and the skip counters) kept the order in which the workers' counts were
    merged, so identical runs on inputs of mixed formats wrote different manifest bytes."""
    from bertprep.pipeline.shards.store import merge_counts, summarize_statistics

    kinds = (("text", "empty"), ("bert", "too_long"))
    parts = [{"reader": {"formats": {f: 1}, "skipped_documents": {w: 1}, "skipped_lines": {w: 2}}} for f, w in kinds]
    one = summarize_statistics(merge_counts(parts[0], parts[1]))
    other = summarize_statistics(merge_counts(parts[1], parts[0]))
    assert json.dumps(one) == json.dumps(other)
    assert list(one["formats"]) == ["bert", "text"] and list(one["documents"]["skipped"]) == ["empty", "too_long"]


@pytest.mark.slow  # a scheduler and a worker process, and a run on them (about 20 s)
def test_relative_paths_on_dask_are_the_launching_folders(tmp_path):
    """Before: with workers started in another folder, a relative -o was written into the workers' folder (a
    staging folder left there) and a relative -i was "not found" by them; the local runner accepted both."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    (tmp_path / "workers").mkdir()
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "a.txt").write_bytes((PIPELINE / "a.txt").read_bytes())
    log = open(tmp_path / "cluster.log", "w")  # noqa: SIM115 (the cluster's output; closed in the finally)
    procs = [subprocess.Popen([dask, "scheduler", "--port", str(port), "--no-dashboard"], stdout=log, stderr=log)]
    try:
        time.sleep(2)
        procs.append(subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard"], stdout=log,
                                      stderr=log, cwd=tmp_path / "workers"))  # fmt: skip
        done = bertprep("make-shards", "-i", "a.txt", "--vocab", VOCAB, "-o", "out", "--dupe-factor", 1, "-q",
                        "--runner=DaskRunner", f"--dask_client_address={address}", cwd=tmp_path / "here",
                        timeout=150)  # fmt: skip
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        log.close()
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "here" / "out" / "manifest.json").exists()
    assert list((tmp_path / "workers").iterdir()) == []


def test_a_datasets_metadata_files_are_not_input_files(tmp_path):
    """Before: `--input-format hf` on a save_to_disk folder counted dataset_info.json and state.json as input
    files (3 files for 1 data file)."""
    ds = tmp_path / "ds"
    ds.mkdir()
    import pyarrow as pa

    table = pa.table({"text": ["The river rose after the rain. The bridge was closed.", "One more sentence here."]})
    with pa.OSFile(str(ds / "data-00000-of-00001.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (ds / "dataset_info.json").write_text("{}")
    (ds / "state.json").write_text('{"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}')
    result = make_shards("-i", ds, "--input-format", "hf", "-o", tmp_path / "out", "--max-seq-length", "32",
                         "--max-predictions-per-seq", "5")  # fmt: skip
    assert result.exit_code == 0, result.output
    statistics = json.loads((tmp_path / "out" / "manifest.json").read_text())["statistics"]
    assert statistics["files"] == 1 and statistics["formats"] == {"hf": 1}
