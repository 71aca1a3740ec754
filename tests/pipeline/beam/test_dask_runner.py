"""bertprep's Dask runner adapter (``bertprep.pipeline.beam.dask_runner``) on a real cluster of processes.

Each test runs a tiny Beam pipeline on a ``distributed.LocalCluster`` of two single-thread worker
*processes* (module-scoped; the kill test kills one, and waits for its restart) and asserts one property that
Beam's stock ``DaskRunner`` (apache-beam 2.77) gets wrong. To see the stock runner fail them, run this file with
``BERTPREP_DASK_STOCK=1``: the pipelines then run on ``apache_beam.runners.dask.dask_runner.DaskRunner``
instead (checked by hand; which tests fail there, and how, is in each docstring).

DoFns live at module level so the worker processes import them by reference.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import apache_beam as beam
import dask.bag as db
import distributed
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.dask.dask_runner import DaskRunner

from bertprep.pipeline.beam import dask_runner as dr

STOCK = os.environ.get("BERTPREP_DASK_STOCK") == "1"


@pytest.fixture(scope="module")
def cluster():
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        yield c, client


def run(build, address: str, *args: str) -> None:
    """Run ``build(p)`` to completion on the cluster at ``address`` (the stock runner when STOCK)."""
    options = PipelineOptions(["--dask_client_address", address, *args])
    runner = DaskRunner() if STOCK else dr.BertprepDaskRunner()
    with beam.Pipeline(runner=runner, options=options) as p:
        build(p)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def write(pcoll, path: Path, label: str):
    return pcoll | label >> beam.io.WriteToText(str(path), shard_name_template="")


def append_line(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text + "\n")


class SplitParity(beam.DoFn):
    def process(self, x):
        if x % 2:
            yield beam.pvalue.TaggedOutput("odd", x)
        else:
            yield x

    class Strings(beam.DoFn):
        """By the parity of the number in ``docN...``."""

        def process(self, doc):
            if int(doc[3:].rstrip("xy")) % 2:
                yield beam.pvalue.TaggedOutput("odd", doc)
            else:
                yield doc


def by_three(x, n):
    return x % n


def mark(x, log: str):
    """Identity that records each call (element and worker pid) in ``log``."""
    append_line(log, f"{x}:{os.getpid()}")
    return x


def add_sum(x, values):
    return x + sum(values)


def fan_out(n):
    return list(range(n))


def with_pid(x, log: str):
    """``x:pid``; the first elements wait until elements have started in two worker processes (``log``), so
    that the scheduler spreads the partitions (stealing from the busy worker that holds them all) however fast
    the elements are, and no longer than it takes. After 10 s without a second process the first waiter writes
    ``gave-up`` and none waits any more (the test then fails on its one process)."""
    append_line(log, str(os.getpid()))
    deadline = time.monotonic() + 10
    while len(set(lines(Path(log)))) < 2:  # (``gave-up`` makes two)
        if time.monotonic() > deadline:
            append_line(log, "gave-up")
        time.sleep(0.01)
    return f"{x}:{os.getpid()}"


class BundleLog(beam.DoFn):
    """Records one line per bundle (= one Dask partition) in ``log``."""

    def __init__(self, log: str):
        self.log = log

    def start_bundle(self):
        self.n = 0

    def process(self, x):
        self.n += 1
        yield x

    def finish_bundle(self):
        append_line(self.log, str(self.n))


def held(x, started: str, released: str):
    """``x``, once the file ``released`` exists (at most 30 s): the element's task is still running when a
    ``kill -9`` aimed at its worker lands (the test writes ``released`` after the kill)."""
    append_line(started, f"{x}:{os.getpid()}")
    deadline = time.monotonic() + 30
    while not os.path.exists(released) and time.monotonic() < deadline:
        time.sleep(0.01)
    return x


def boom(x):
    raise RuntimeError("boom on purpose")


# ---------------------------------------------------------------------------------------------------


@pytest.mark.slow  # ~12 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_tagged_outputs_reach_only_their_consumers(cluster, tmp_path):
    """with_outputs and beam.Partition: each consumer sees only its tag.

    Stock (checked by hand): every consumer gets all outputs mixed (and only the last sink is written at
    all), so ``even``/``odd``/``part*`` are missing or wrong.
    """
    c, _ = cluster

    def build(p):
        nums = p | beam.Create(list(range(12)))
        split = nums | beam.ParDo(SplitParity()).with_outputs("odd", main="even")
        write(split.even, tmp_path / "even", "we")
        write(split.odd, tmp_path / "odd", "wo")
        parts = nums | beam.Partition(by_three, 3)
        for i in range(3):
            write(parts[i], tmp_path / f"part{i}", f"wp{i}")

    run(build, c.scheduler_address)
    assert sorted(map(int, lines(tmp_path / "even"))) == [0, 2, 4, 6, 8, 10]
    assert sorted(map(int, lines(tmp_path / "odd"))) == [1, 3, 5, 7, 9, 11]
    for i in range(3):
        assert sorted(map(int, lines(tmp_path / f"part{i}"))) == [x for x in range(12) if x % 3 == i]


def test_every_sink_is_written_and_shared_upstream_runs_once(cluster, tmp_path):
    """Two sinks of one upstream: both written; the upstream DoFn ran once per element, not once per sink.

    Stock (checked by hand): only the sink translated last is computed; ``a`` is never written.
    """
    c, _ = cluster
    log = str(tmp_path / "calls.log")

    def build(p):
        shared = p | beam.Create(list(range(6))) | beam.Map(mark, log)
        write(shared, tmp_path / "a", "wa")
        write(shared | beam.Map(lambda x: x * 10), tmp_path / "b", "wb")

    run(build, c.scheduler_address)
    assert sorted(map(int, lines(tmp_path / "a"))) == list(range(6))
    assert sorted(map(int, lines(tmp_path / "b"))) == [x * 10 for x in range(6)]
    calls = sorted(int(line.split(":")[0]) for line in lines(Path(log)))
    assert calls == list(range(6)), calls


def test_side_input_computed_once_for_all_readers(cluster, tmp_path):
    """A side input read by two ParDos over several partitions: its upstream runs once per element.

    Stock (checked by hand): each reading task recomputes the side input inside itself (``list(bag)`` in
    ``DaskBagWindowedIterator``): with one reader of 2 partitions its upstream ran 6 times for 3 elements.
    (Here stock fails first on ``r1``, never written: only its last sink is computed.)
    """
    c, _ = cluster
    log = str(tmp_path / "side.log")

    def build(p):
        side = p | "side" >> beam.Create([1, 2, 3]) | beam.Map(mark, log)
        nums = p | beam.Create(list(range(8)))
        write(nums | "r1" >> beam.Map(add_sum, beam.pvalue.AsList(side)), tmp_path / "r1", "w1")
        write(nums | "r2" >> beam.Map(add_sum, beam.pvalue.AsIter(side)), tmp_path / "r2", "w2")

    run(build, c.scheduler_address)
    assert sorted(map(int, lines(tmp_path / "r1"))) == [x + 6 for x in range(8)]
    assert sorted(map(int, lines(tmp_path / "r2"))) == [x + 6 for x in range(8)]
    calls = sorted(int(line.split(":")[0]) for line in lines(Path(log)))
    assert calls == [1, 2, 3], f"side input upstream ran {len(calls)} times, not 3: {calls}"


@pytest.mark.slow  # ~1 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_reshuffle_spreads_elements_over_worker_processes(cluster, tmp_path):
    """One partition (a Create of one element fanned out) reshuffled: both worker processes do work.

    Stock (checked by hand): Reshuffle is the identity, so all 16 elements stay in one partition and one
    worker process handles them all.
    """
    c, client = cluster
    log = str(tmp_path / "started.log")

    def build(p):
        one = p | beam.Create([16]) | beam.FlatMap(fan_out)
        write(one | beam.Reshuffle() | beam.Map(with_pid, log), tmp_path / "pids", "w")

    run(build, c.scheduler_address)
    got = [line.split(":") for line in lines(tmp_path / "pids")]
    assert sorted(int(x) for x, _ in got) == list(range(16))  # content unchanged
    pids = {int(pid) for _, pid in got}
    assert pids <= set(client.run(os.getpid).values())
    assert len(pids) >= 2, f"all elements ran in one worker process {pids}"


def test_reshuffle_is_deterministic_and_hashes_nothing():
    """The same input gives the same partitions, run after run (no salted hash(), no randomness)."""
    bag = db.from_sequence(["b", "a", ("k", 1), None, 3.5, "c", "d"], npartitions=2)
    first = dr.reshuffle(bag, 3).to_delayed()
    again = dr.reshuffle(bag, 3).to_delayed()
    import dask

    parts1 = dask.compute(*first, scheduler="sync")
    parts2 = dask.compute(*again, scheduler="sync")
    assert parts1 == parts2
    assert len(parts1) == 3 and sorted(map(len, parts1)) == [2, 2, 3]
    assert sorted(map(repr, (x for part in parts1 for x in part))) == sorted(
        map(repr, ["b", "a", ("k", 1), None, 3.5, "c", "d"])
    )


def test_partition_count_follows_the_workers(cluster, tmp_path):
    """8 elements on 2 single-thread workers: 8 bundles (4 per thread, so uneven elements balance);
    ``--dask_npartitions=3``: 3 bundles.

    Stock (checked by hand): ``Create`` puts up to 128 elements in a partition: one bundle of 8 (which
    ran twice, ``[8, 8]``: ``WriteToText`` reads it again through a side input).
    """
    c, client = cluster
    assert dr.choose_npartitions(client) == 2 * dr.PARTITIONS_PER_THREAD == 8
    assert dr.choose_npartitions(client, 5) == 5

    for extra, expected in (((), [1] * 8), (("--dask_npartitions=3",), [2, 3, 3])):
        log = tmp_path / f"bundles{len(extra)}.log"

        def build(p):
            write(p | beam.Create(list(range(8))) | beam.ParDo(BundleLog(str(log))), tmp_path / "o", "w")  # noqa: B023 (the pipeline is built and run in this same iteration)

        run(build, c.scheduler_address, *extra)
        assert sorted(map(int, lines(log))) == expected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # ~1 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_unreachable_scheduler_is_one_clear_line_fast(tmp_path):
    """No scheduler at the address: a DaskSchedulerUnreachable (a ValueError) in one line, in < 15 s.

    Stock (checked by hand): distributed's ``OSError: Timed out trying to connect to tcp://...`` after
    its retries, with a long traceback.
    """
    address = f"tcp://127.0.0.1:{_free_port()}"
    start = time.monotonic()
    with (
        pytest.raises(dr.DaskSchedulerUnreachable) as err,
        beam.Pipeline(
            runner=dr.BertprepDaskRunner(),
            options=PipelineOptions(["--dask_client_address", address, "--dask_connection_timeout=1"]),
        ) as p,
    ):
        p | beam.Create([1]) | beam.Map(str)
    assert time.monotonic() - start < 15
    message = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in message
    assert message.startswith(f"cannot reach the Dask scheduler at {address}: start one with `dask scheduler`")
    assert f"`dask worker {address}`" in message and "--dask_client_address" in message

    with pytest.raises(dr.DaskSchedulerUnreachable, match="no Dask scheduler file at"):
        dr.connect_or_explain(scheduler_file=str(tmp_path / "scheduler.json"), timeout=1)


def test_short_runner_name_resolves_to_the_adapter():
    """``--runner=DaskRunner`` (any case) gives the adapter; Beam's own table does not know the name."""
    from apache_beam.runners.runner import create_runner as beam_create_runner

    with pytest.raises(ValueError, match="Unexpected pipeline runner"):
        beam_create_runner("DaskRunner")
    for name in ("DaskRunner", "daskrunner", "Dask"):
        assert isinstance(dr.create_runner(name), dr.BertprepDaskRunner)
        assert isinstance(dr.runner_from_options(PipelineOptions([f"--runner={name}"])), dr.BertprepDaskRunner)
    assert dr.runner_from_options(PipelineOptions(["--runner=DirectRunner"])) is None
    assert "DirectRunner" in type(dr.create_runner("DirectRunner")).__name__


def _child_pids() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.slow  # ~9 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_local_cluster_is_closed_even_when_the_run_fails():
    """No address: the adapter starts a LocalCluster of processes, and a failing run still closes it."""
    before = _child_pids()
    pipeline = beam.Pipeline(runner=dr.BertprepDaskRunner(), options=PipelineOptions([]))
    with pytest.raises(Exception, match="boom on purpose"), pipeline as p:
        p | beam.Create([1, 2]) | beam.Map(boom)
    deadline = time.monotonic() + 10
    while _child_pids() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _child_pids() - before, "worker processes of the local cluster are still running"


@pytest.mark.slow  # ~2 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_killed_worker_mid_run_is_rerun_by_dask(cluster, tmp_path):
    """``kill -9`` of a worker process that is running a task: Dask reruns its tasks; the run finishes
    with every element written once, in bounded time (no hang).

    (Dask's own resilience, kept by the adapter: the nanny restarts the worker, the scheduler reschedules
    the lost tasks. Stock passes this one too: it has a single sink.) On the module's cluster: the test waits
    for its two workers again afterwards.
    """
    c, client = cluster
    started, released = tmp_path / "started.log", tmp_path / "released"
    killed: list[int] = []
    worker_pids = set(client.run(os.getpid).values())

    def killer():
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                for line in lines(started):
                    pid = int(line.split(":")[1])
                    if pid in worker_pids:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        return
                time.sleep(0.01)
        finally:
            released.touch()  # the other elements go on (and the rerun of the killed one)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        options = PipelineOptions(["--dask_client_address", c.scheduler_address])
        runner = DaskRunner() if STOCK else dr.BertprepDaskRunner()
        pipeline = beam.Pipeline(runner=runner, options=options)
        elements = pipeline | beam.Create(list(range(8))) | beam.Map(held, str(started), str(released))
        write(elements, tmp_path / "out", "w")
        result = pipeline.run()
        result.wait_until_finish(duration=90_000)  # ms; raises on timeout instead of hanging
        elapsed = time.monotonic() - start
        thread.join(5)
    finally:
        released.touch()
        client.wait_for_workers(2, timeout=120)  # the nanny's new worker, for the tests after this one

    assert killed, "the killer never saw a task start"
    assert elapsed < 90
    assert sorted(map(int, lines(tmp_path / "out"))) == list(range(8))


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_output_content_is_the_same_for_any_partition_count(cluster, tmp_path):
    """Tags, a side input and a Reshuffle at 1, 2 and 3 partitions: the same elements every time.

    The fixes regroup elements and may reorder them within a partition; they never change one.
    """
    c, _ = cluster
    runs = []
    for n in (1, 2, 3):

        def build(p, n=n):
            nums = p | beam.Create([f"doc{i}" for i in range(20)])
            side = p | "side" >> beam.Create(["x", "y"])
            split = (
                nums
                | beam.Reshuffle()
                | beam.Map(lambda d, s: d + "".join(s), beam.pvalue.AsList(side))
                | beam.ParDo(SplitParity.Strings()).with_outputs("odd", main="even")
            )
            write(split.even, tmp_path / f"even{n}", "we")
            write(split.odd, tmp_path / f"odd{n}", "wo")

        run(build, c.scheduler_address, f"--dask_npartitions={n}")
        runs.append((sorted(lines(tmp_path / f"even{n}")), sorted(lines(tmp_path / f"odd{n}"))))
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0][0]) == len(runs[0][1]) == 10 and runs[0][0][0] == "doc0xy"


@pytest.mark.slow
def test_make_shards_on_dask_is_byte_identical_to_the_local_runner(cluster, tmp_path):
    """bertprep's real pipeline (held-out split: two sinks; 4 shards) on the adapter, 3 partitions:
    every shard and vocab byte-identical to the default local runner's (manifests differ in output_dir).

    Runs make-shards through the CLI with Beam's fully qualified ``--runner`` (make-shards does not know
    ``--runner=DaskRunner`` yet); about 10 s here.
    """
    from click.testing import CliRunner

    from bertprep.cli.main import cli

    c, _ = cluster
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "pipeline"
    common = [
        "make-shards",
        "-i",
        str(fixtures / "a.txt"),
        "-i",
        str(fixtures / "b.txt"),
        "--vocab",
        str(fixtures / "vocab.txt"),
        "--num-shards",
        "4",
        "--eval-fraction",
        "0.5",
    ]
    local = CliRunner().invoke(cli, [*common, "-o", str(tmp_path / "local")], catch_exceptions=False)
    assert local.exit_code == 0, local.output
    on_dask = CliRunner().invoke(
        cli,
        [
            *common,
            "-o",
            str(tmp_path / "dask"),
            "--runner=bertprep.pipeline.beam.dask_runner.BertprepDaskRunner",
            f"--dask_client_address={c.scheduler_address}",
            "--dask_npartitions=3",
        ],
        catch_exceptions=False,
    )
    assert on_dask.exit_code == 0, on_dask.output
    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*") if p.is_file())
    assert any(f.suffix == ".arrow" for f in files) and any(f.parts[0] == "eval" for f in files)
    for f in files:
        if f.name != "manifest.json":
            assert (tmp_path / "local" / f).read_bytes() == (tmp_path / "dask" / f).read_bytes(), f


def test_a_stop_during_the_closing_of_a_finished_run_still_closes_within_the_bound():
    """Before: a Ctrl-C that landed while a finished run closed its local cluster left it half closed, and
    distributed's exit hook (``close_clusters``) waited on it until make-shards' watchdog ended the process
    10 s later, with a second line (reproduced end to end: a Ctrl-C 3.8-4.2 s into a 4.7 s Dask run, every time).
    Now the stop closes client and cluster again within ``STOP_CLOSE_TIMEOUT_S`` and goes on."""

    class Closing:
        def __init__(self, stop_first: bool):
            self.calls, self.stop_first, self.shutdown_on_close = [], stop_first, True

        def close(self, timeout=None):
            self.calls.append(timeout)
            if self.stop_first and len(self.calls) == 1:
                raise KeyboardInterrupt  # the stop, raised in the main thread while it closes

    client, cluster = Closing(stop_first=False), Closing(stop_first=True)
    with pytest.raises(KeyboardInterrupt):
        dr._close(client, cluster)
    assert client.calls == [None, dr.STOP_CLOSE_TIMEOUT_S]
    assert cluster.calls == [None, dr.STOP_CLOSE_TIMEOUT_S] and cluster.shutdown_on_close is False
