"""Run a Beam pipeline on a Dask cluster: a thin adapter over Beam's own ``DaskRunner``.

Beam ships ``apache_beam.runners.dask.dask_runner.DaskRunner`` (young; checked against apache-beam 2.77),
which translates each Beam transform into a ``dask.bag`` operation and lets Dask's scheduler and workers do
the work. As released it gets six things wrong that bertprep's ``make-shards`` pipeline depends on. This
module keeps Beam's translation (its ``dask_overrides``, its ``Create``/``GroupByKey``/``Flatten``
operations, its ``DaskOptions``) and replaces only the broken parts, one small function each, every one
naming the upstream issue and meant to be dropped when Beam fixes it:

1. :func:`split_outputs_by_tag` -- tagged outputs (``ParDo(...).with_outputs(...)``, ``beam.Partition``)
   reach only the consumers of their own tag (Beam's version hands every consumer all outputs mixed).
2. :func:`compute_all_sinks` -- every leaf of the graph (every sink) is computed, in one
   ``client.compute`` call, so upstream shared by several sinks runs once (Beam's computes only the last).
3. :func:`side_input_dependency` -- a side input is a task dependency computed once and shipped to the
   tasks that read it (Beam's recomputes it, with everything upstream, inside every task that reads it:
   checked by hand, a 3-element side input read by a 2-partition ParDo ran its upstream 6 times).
4. :func:`reshuffle` -- ``beam.Reshuffle`` redistributes elements over ``npartitions`` partitions
   (Beam's is a no-op, so one task does everything downstream of a one-partition ``Create``).
5. :func:`choose_npartitions` / :func:`create_bag` -- the partition count follows the cluster's worker
   threads (a few per thread, so uneven elements balance), overridable with Beam's ``--dask_npartitions``
   (Beam's ``Create`` puts 128 elements in a partition: 8 input files make one partition, run by one worker).
6. :func:`_run_dofn_bundle` -- every task first gives its worker's file systems the run's settings
   (``filesystems.worker_settings``: the Beam options, as Beam's own SDK workers get them, and the storage endpoint
   variables such as ``STORAGE_EMULATOR_HOST`` and ``AWS_ENDPOINT_URL_S3``). Beam's runner never calls
   ``FileSystems.set_options`` on a worker, so ``s3://`` had no options there, ``--s3_endpoint_url`` did not
   reach the workers, and a ``gs://`` run against a GCS emulator sent the workers to storage.googleapis.com
   (after Beam's 25 s search for Google credentials in each worker process).

How a caller uses it
--------------------
``runner_from_options(options)`` returns a :class:`BertprepDaskRunner` when ``--runner`` names Dask
(``DaskRunner``, ``dask``, any case; Beam's own short-name table lacks it), else None (let Beam pick)::

    from bertprep.pipeline.beam.dask_runner import runner_from_options
    runner = runner_from_options(options)            # or BertprepDaskRunner() directly
    try:
        with beam.Pipeline(runner=runner, options=options) as p:
            ...
    except DaskSchedulerUnreachable as e:            # a ValueError: print it, exit 2
        raise SystemExit(str(e))

Connecting to a scheduler, and the errors above, live in :mod:`~bertprep.pipeline.beam.dask_connection`; this
module re-exports them.

Importing this module needs the ``dask`` extra (``pip install 'bertprep[dask]'``: dask, distributed,
apache-beam[dask]); a caller that must work without it checks ``--runner`` first (the names are
:data:`DASK_RUNNER_NAMES`) and imports this module only for Dask.

Options (Beam's ``DaskOptions``; all already defined by apache-beam 2.77): ``--dask_client_address``
(``tcp://HOST:PORT`` of a running ``dask scheduler``), ``--dask_scheduler_file`` (HPC: the JSON file
``dask scheduler --scheduler-file`` writes), ``--dask_connection_timeout`` (seconds, default 10 here),
``--dask_npartitions`` / ``--dask_partition_size``. With neither an address nor a scheduler file, the
runner starts a ``distributed.LocalCluster(processes=True)`` and closes it, worker processes included,
when the run ends -- also when it fails. A client it opened to a remote scheduler is closed likewise.
``result.wait_until_finish()`` (what ``with beam.Pipeline(...)`` calls) is what waits and closes:
call it.

What it guarantees: every sink is written; outputs go to the consumers of their tag only; side inputs
are computed once per run; an unreachable scheduler is one clear line (:class:`DaskSchedulerUnreachable`)
within the connection timeout, and so are a scheduler no worker joins within it (:class:`DaskNoWorkers`) and a
scheduler that goes away mid-run (:class:`DaskSchedulerLost`); a worker that dies mid-run has its tasks
rerun by Dask elsewhere (Dask's own resilience; ``distributed.scheduler.allowed-failures`` bounds the
retries, then the run fails with the error). Element *content* is never changed by these fixes: Reshuffle
deals elements by position
(no hash of any kind, salted or not), side inputs are the same values in partition order, and partition
counts only regroup elements. Element *order* within a partition may differ from other runners with
other partition counts, as Beam allows; bertprep's shard writer sorts by stable keys, so its shards are
byte-identical whatever the partitioning. Not supported (Beam's translation lacks them too): windowing
beyond the global window, element timestamps, ``beam.io.Read`` of a BoundedSource (read files from a
``Create`` of paths, as bertprep does), Beam metrics (``result.metrics()`` raises, as in Beam's).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import logging
import typing as t

import apache_beam as beam
import dask
import dask.bag as db
import distributed
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.pipeline import AppliedPTransform, PipelineVisitor
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, Receiver, _OutputHandler
from apache_beam.runners.dask.dask_runner import DaskOptions, DaskRunner, DaskRunnerResult
from apache_beam.runners.dask.overrides import _Create, _Flatten, _GroupByKeyOnly, _Reshuffle, dask_overrides
from apache_beam.runners.dask.transform_evaluator import GroupByKey as _BeamGroupByKey
from apache_beam.runners.dask.transform_evaluator import get_windowed_value
from apache_beam.runners.runner import PipelineRunner, PipelineState
from apache_beam.runners.runner import create_runner as _beam_create_runner
from apache_beam.transforms.sideinputs import SideInputMap

from bertprep.pipeline.beam import filesystems
from bertprep.pipeline.beam.dask_connection import (  # noqa: F401  (the connection errors re-exported for callers)
    CONNECTION_LOST,
    DEFAULT_CONNECT_TIMEOUT_S,
    DaskNoWorkers,
    DaskSchedulerLost,
    DaskSchedulerUnreachable,
    LostConnectionRecords,
    connect_or_explain,
    lost_message,
    wait_for_a_worker,
)

_LOG = logging.getLogger(__name__)

#: ``--runner`` values (lower-cased) that mean this adapter.
DASK_RUNNER_NAMES = frozenset({"dask", "daskrunner", "bertprepdaskrunner"})


# --------------------------------------------------------------------------------------------------
# Runner names (connecting to a scheduler: dask_connection.py)
# --------------------------------------------------------------------------------------------------


def is_dask_runner_name(name: str | None) -> bool:
    """Whether ``--runner`` ``name`` means Dask (``DaskRunner``, ``dask``, any case)."""
    return name is not None and name.lower() in DASK_RUNNER_NAMES


def create_runner(name: str) -> PipelineRunner:
    """Beam's ``create_runner`` that also knows ``DaskRunner`` by its short name.

    Beam resolves short names through ``apache_beam.runners.runner._RUNNER_MAP``, built from
    ``StandardOptions.ALL_KNOWN_RUNNERS``, which lacks the Dask runner (apache/beam#24578: "Add Dask runner
    to runner list"), so ``--runner=DaskRunner`` fails there. Drop this when Beam lists it.
    """
    if is_dask_runner_name(name):
        return BertprepDaskRunner()
    return _beam_create_runner(name)


def runner_from_options(options: PipelineOptions) -> PipelineRunner | None:
    """The runner ``options`` name when it is Dask (a :class:`BertprepDaskRunner`), else None.

    None means: pass no runner to ``beam.Pipeline`` and Beam resolves ``--runner`` itself as before.
    """
    name = options.view_as(StandardOptions).runner
    if isinstance(name, str) and is_dask_runner_name(name):
        return BertprepDaskRunner()
    return None


# --------------------------------------------------------------------------------------------------
# Fix 5: partition count from the cluster
# --------------------------------------------------------------------------------------------------


#: Partitions per worker thread when ``--dask_npartitions`` is not given. Dask balances whole partitions
#: (each task is one partition), and make-shards' elements differ in cost (a short file beside a long one,
#: a bucket holding a book beside one of short articles); with one partition per thread a worker that draws
#: the cheap half idles while the other works (measured: 16 files of unequal size on 2 workers, 1.08x over
#: 1 worker). A few partitions per thread let the scheduler hand the next one to whichever worker is free,
#: as Beam's local runner hands out elements; each extra partition costs one DoFn setup per stage.
PARTITIONS_PER_THREAD = 4


def choose_npartitions(client: distributed.Client, requested: int | None = None) -> int:
    """Partitions per collection: ``requested`` (``--dask_npartitions``), else
    :data:`PARTITIONS_PER_THREAD` times the cluster's total worker threads.

    Beam's ``Create`` puts ``max(128, sqrt(n)/10)`` elements in a partition whatever the cluster
    (apache/beam#26669 "Dask runner limited to 100 concurrent tasks"; apache/beam#33805 made the count
    configurable but the default still ignores the cluster), so bertprep's 8 input files were one
    partition and one worker did almost everything. Drop this when Beam sizes partitions by the cluster.
    Raises ValueError for ``requested`` < 1.
    """
    if requested is not None and requested != 0:
        if requested < 1:
            raise ValueError(f"--dask_npartitions must be >= 1, not {requested}")
        return int(requested)
    threads = sum(client.nthreads().values())
    return max(1, threads) * PARTITIONS_PER_THREAD


def create_bag(values: t.Sequence, npartitions: int, partition_size: int | None = None) -> db.Bag:
    """``beam.Create(values)`` as a bag of ``npartitions`` near-equal contiguous partitions.

    (``dask.bag.from_sequence(npartitions=n)`` rounds the partition size up and can give fewer
    partitions than asked: 5 values at n=4 give 3.) ``partition_size`` (``--dask_partition_size``)
    wins when given. Part of fix 5 (apache/beam#26669); drop this when Beam's ``Create`` does it.
    """
    values = list(values)
    if partition_size:
        chunks = [values[i : i + partition_size] for i in range(0, len(values), partition_size)]
    else:
        n = max(1, min(npartitions, len(values)))
        size, extra = divmod(len(values), n)
        chunks, start = [], 0
        for i in range(n):
            stop = start + size + (1 if i < extra else 0)
            chunks.append(values[start:stop])
            start = stop
    if not chunks:
        chunks = [[]]
    return db.from_sequence(chunks, npartitions=len(chunks)).flatten()


# --------------------------------------------------------------------------------------------------
# Fixes 1 and 3: ParDo with outputs kept apart by tag, side inputs computed once
# --------------------------------------------------------------------------------------------------


class _TagReceiver(Receiver):
    """Collects one tag's outputs of a bundle as ``(tag, value)`` pairs."""

    def __init__(self, tag, out: list):
        self.tag, self.out = tag, out

    def receive(self, windowed_value):
        self.out.append((self.tag, windowed_value.value))


class _TagReceivers(dict):
    """Tag -> receiver, made on first use (the output handler asks by tag)."""

    def __init__(self, out: list):
        super().__init__()
        self.out = out

    def __missing__(self, tag):
        self[tag] = _TagReceiver(tag, self.out)
        return self[tag]


@dataclasses.dataclass(frozen=True)
class _SideInputSpec:
    """What a task needs to rebuild one side input view from its computed values."""

    view_class: type
    view_options: dict
    window_mapping_fn: t.Any


class _WindowedValues:
    """The computed values of a side input, as the ``WindowedValue``s ``SideInputMap`` iterates."""

    def __init__(self, values: list, window_fn):
        self.values, self.window_fn = values, window_fn

    def __iter__(self):
        for v in self.values:
            yield get_windowed_value(v, self.window_fn)


def _run_dofn_bundle(items, settings, fn, label, window_fn, args, kwargs, specs, *side_values):
    """One partition through a DoFn (one Beam bundle); returns ``(tag, value)`` pairs, main tag None.

    Receivers are made here, per bundle, and keep each value's tag (fix 1). Beam's version builds one
    receiver set at translation time and returns ``[v.value for v in values]``, which drops the tag:
    tagged values come out as ``WindowedValue``s mixed into the main output. ``settings`` (the run's
    ``filesystems.WorkerSettings``) are applied to this worker's file systems first (fix 6).
    """
    filesystems.apply_worker_settings(settings)
    out: list = []
    receivers = _TagReceivers(out)
    side_inputs = [
        SideInputMap(s.view_class, s.view_options, _WindowedValues(vals, s.window_mapping_fn))
        for s, vals in zip(specs, side_values, strict=True)
    ]
    handler = _OutputHandler(
        window_fn=window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(fn),
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(get_windowed_value(item, window_fn))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return out


def _select_tag(pairs, tag):
    return [v for k, v in pairs if k == tag]


def split_outputs_by_tag(tagged: db.Bag, tags: t.Iterable) -> dict:
    """One bag per output tag of a ParDo whose bag holds ``(tag, value)`` pairs.

    Beam's DaskRunner keys its bags by transform, not by output, so every consumer of any output of a
    ``ParDo(...).with_outputs(...)`` or ``beam.Partition`` gets all outputs mixed together (no upstream
    issue found; apache/beam PR #27618's discussion notes multi-output ParDos as unsupported). Here each
    tag's bag filters the shared ``tagged`` bag, which Dask computes once for all of them. Drop this
    when Beam keeps outputs apart.
    """
    return {tag: tagged.map_partitions(_select_tag, tag) for tag in tags}


def _concat(parts):
    return list(itertools.chain.from_iterable(parts))


def side_input_dependency(bag: db.Bag):
    """A side input's values as one Dask ``Delayed``: computed once, a dependency of each reading task.

    Beam's DaskRunner wraps the side input's bag in an iterator that calls ``list(bag)`` -- a whole new
    compute of the side input and everything upstream of it -- inside every task that reads it (side
    inputs on the DaskRunner: apache/beam PR #27618, closed unmerged; no issue for the recompute). A
    side input with side effects upstream (``WriteToText``'s ``initialize_write`` makes a temp dir)
    runs them once per reading task. Here the values are
    one key of the same graph, so the scheduler computes them once and ships them to the readers. (A
    ``Delayed``, not the ``Item`` the reduction returns: ``map_partitions`` wraps an ``Item`` argument in
    a finalize task of its own per call, and the optimizer then fuses a private copy of the whole
    upstream chain into each, so two readers computed it twice.) Drop this when Beam materialises side
    inputs once.
    """
    return bag.reduction(list, _concat, split_every=False).to_delayed(optimize_graph=False)


# --------------------------------------------------------------------------------------------------
# Fix 4: a real Reshuffle
# --------------------------------------------------------------------------------------------------


def _deal(partition, index: int, n: int):
    """Element ``i`` of input partition ``index`` goes to output ``(index + i) % n``: even, no hashing."""
    out: list[list] = [[] for _ in range(n)]
    for i, x in enumerate(partition):
        out[(index + i) % n].append(x)
    return out


def reshuffle(bag: db.Bag, npartitions: int) -> db.Bag:
    """``beam.Reshuffle`` as a real all-to-all redistribution over ``npartitions`` partitions.

    Beam's DaskRunner replaces ``Reshuffle`` by ``_Reshuffle``, which has no translation and so is the
    identity: a one-partition input stays one task, and one worker writes every shard (no upstream issue
    found). Elements are dealt round-robin by their position (deterministic, balanced, and no hash of the
    element at all: Python's ``hash()`` is salted per process, the cause of apache/beam#29365). Each
    output partition takes its share from every input partition in input order, so content and order
    depend only on the input. Where each output partition runs is Dask's choice (data locality, then
    work stealing to idle workers): partitions whose downstream work takes a fraction of a second may
    stay on the worker that holds the input; longer ones (make-shards' tokenizing and writing) spread.
    Drop this when Beam's Reshuffle redistributes.
    """
    parts = bag.to_delayed(optimize_graph=False)  # keep keys shared with the bag's other consumers
    if not parts:
        return bag
    deal = dask.delayed(_deal, pure=True)
    concat = dask.delayed(_concat, pure=True)
    dealt = [deal(p, j, npartitions) for j, p in enumerate(parts)]
    return db.from_delayed([concat([d[k] for d in dealt]) for k in range(npartitions)])


# --------------------------------------------------------------------------------------------------
# Fix 2: compute every sink
# --------------------------------------------------------------------------------------------------


def _count(partition):
    return sum(1 for _ in partition)


def compute_all_sinks(client: distributed.Client, leaves: t.Sequence[db.Bag]) -> list:
    """Futures for every leaf bag, submitted in one ``client.compute`` call.

    Beam's DaskRunner computes only the last bag it translated, assuming it is connected to the whole
    graph; any other sink (a second ``WriteToText``, the held-out split's writer) is silently dropped
    (no upstream issue found). One ``compute`` of all leaves merges their graphs, so upstream shared by
    several sinks runs once. Each leaf is reduced to its element count, so no data travels back to the
    client. Drop this when Beam computes all leaves.
    """
    counts = [leaf.reduction(_count, sum, split_every=False) for leaf in leaves]
    return list(client.compute(counts))


# --------------------------------------------------------------------------------------------------
# The translation and the runner
# --------------------------------------------------------------------------------------------------


class _BagVisitor(PipelineVisitor):
    """Translates each leaf transform into bags, one per *output PCollection* (not per transform)."""

    def __init__(self, npartitions: int, partition_size: int | None, settings: filesystems.WorkerSettings):
        self.npartitions = npartitions
        self.partition_size = partition_size
        self.settings = settings
        self.bags: dict[int, db.Bag | None] = {}  # id(PCollection) -> bag
        self.order: list = []  # PCollections in translation order
        self.consumed: set[int] = set()
        self._side_items: dict = {}

    def _input(self, pvalue):
        if isinstance(pvalue, beam.pvalue.PBegin):
            return None
        self.consumed.add(id(pvalue))
        return self.bags[id(pvalue)]

    def _side_input(self, si):
        key = id(si.pvalue)
        self.consumed.add(key)
        if key not in self._side_items:
            bag = self.bags[key]
            if bag is None:
                raise NotImplementedError(f"side input {si.pvalue} has no data on the Dask runner")
            self._side_items[key] = side_input_dependency(bag)
        return self._side_items[key]

    def visit_transform(self, node: AppliedPTransform) -> None:
        transform = node.transform
        inputs = [self._input(p) for p in node.inputs]
        outputs = dict(node.outputs)
        kind = type(transform)
        result: dict[t.Any, t.Any]
        if kind is _Create:
            assert isinstance(transform, _Create)
            result = {tag: create_bag(transform.values, self.npartitions, self.partition_size) for tag in outputs}
        elif kind is beam.ParDo:
            result = self._pardo(node, inputs[0], outputs)
        elif kind is _GroupByKeyOnly:
            result = {tag: _BeamGroupByKey(node).apply(inputs[0]) for tag in outputs}
        elif kind is _Flatten:
            bags = [b for b in inputs if b is not None]
            result = {tag: db.concat(bags) for tag in outputs}
        elif kind is _Reshuffle:
            result = {tag: reshuffle(inputs[0], self.npartitions) for tag in outputs}
        elif kind is beam.Impulse:  # Beam's: one empty bytes element (Beam's DaskRunner gives nothing)
            result = {tag: db.from_sequence([b""], npartitions=1) for tag in outputs}
        else:  # Beam's NoOp: the input passes through (e.g. _GroupAlsoByWindow, whose work GBK did)
            if (not inputs or inputs[0] is None) and outputs:
                raise NotImplementedError(
                    f"the Dask runner cannot run {node.full_label!r} ({kind.__name__}); "
                    "read files from a beam.Create of their paths instead"
                )
            result = dict.fromkeys(outputs, inputs[0] if inputs else None)
        for tag, pcoll in outputs.items():
            self.bags[id(pcoll)] = result[tag]
            self.order.append(pcoll)

    def _pardo(self, node, input_bag, outputs):
        transform = node.transform
        main_input = next(iter(node.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        specs = tuple(_SideInputSpec(type(si), si._view_options(), si._window_mapping_fn) for si in node.side_inputs)
        items = [self._side_input(si) for si in node.side_inputs]
        tagged = input_bag.map_partitions(
            _run_dofn_bundle,
            self.settings,
            transform.fn,
            transform.label,
            window_fn,
            list(transform.args),
            dict(transform.kwargs),
            specs,
            *items,
        )
        return split_outputs_by_tag(tagged, outputs)

    def leaves(self) -> list:
        return [self.bags[id(p)] for p in self.order if id(p) not in self.consumed and self.bags[id(p)] is not None]


@dataclasses.dataclass
class BertprepDaskResult(DaskRunnerResult):
    """Beam's Dask result that also closes what the run opened (local cluster, client) when it ends."""

    cluster: t.Any = None
    owns_client: bool = True
    npartitions: int = 0

    def wait_until_finish(self, duration=None) -> str:
        """Beam's wait, and :class:`DaskSchedulerLost` (one line) when the scheduler went away meanwhile: the
        futures then end cancelled (``CancelledError``) or, in some versions, unfinished without an error, and
        the run went on to read a manifest that was never written."""
        quiet = LostConnectionRecords()
        handlers = logging.getLogger().handlers
        for handler in handlers:
            handler.addFilter(quiet)
        try:
            state = super().wait_until_finish(duration)
            unfinished = sum(1 for f in self.futures if f.status != "finished")
            if unfinished:
                self._state = PipelineState.FAILED
                raise DaskSchedulerLost(lost_message(self._address(), unfinished, len(self.futures)))
            return state
        except CONNECTION_LOST as e:
            unfinished = sum(1 for f in self.futures if f.status != "finished")
            raise DaskSchedulerLost(lost_message(self._address(), unfinished, len(self.futures))) from e
        except KeyboardInterrupt:  # Ctrl-C / SIGTERM (make-shards' stop is one): the workers are being killed
            self._state = PipelineState.CANCELLED
            self.close(timeout=STOP_CLOSE_TIMEOUT_S)
            raise
        finally:
            try:  # the filter stays through close(): the client's reconnect task, cancelled there, logs the lost
                if self._state in (PipelineState.DONE, PipelineState.FAILED):  # connection's traceback then
                    self.close()
            finally:
                for handler in handlers:
                    handler.removeFilter(quiet)

    def _address(self) -> str:
        try:
            return self.client.scheduler.address
        except AttributeError:
            return "its address"

    def cancel(self) -> str:
        try:
            return super().cancel()
        finally:
            self.close()

    def close(self, timeout: float | None = None) -> None:
        """Close the client (if the run opened it) and the local cluster with its worker processes; with
        ``timeout`` (seconds, a stopped run) give up after it (see :func:`_close`)."""
        _close(self.client if self.owns_client else None, self.cluster, timeout)


#: Seconds a stopped run (Ctrl-C) gives the local cluster to close: its workers are being killed by the stop,
#: and distributed's own exit hook (``close_clusters``) waited 10 s for their nannies before the process ended.
STOP_CLOSE_TIMEOUT_S = 1.0


def _close(client, cluster, timeout: float | None = None) -> None:
    """Close ``client`` and ``cluster`` (either may be None), best effort. With ``timeout`` (a stopped run) each
    close gives up after that many seconds, and the cluster is marked so that distributed's exit hook does not
    wait on it again (``shutdown_on_close``). A stop (``KeyboardInterrupt``: Ctrl-C, SIGTERM) that lands during
    a close without ``timeout`` (a run that has just finished) closes both again within
    :data:`STOP_CLOSE_TIMEOUT_S`, then goes on: before, the half-closed cluster was left to distributed's exit
    hook (``close_clusters``), which waited on it until make-shards' watchdog ended the process 10 s later."""
    for thing in (client, cluster):
        if thing is not None:
            try:
                if timeout is None:
                    thing.close()
                else:
                    thing.close(timeout=timeout)
            except KeyboardInterrupt:
                if timeout is None:
                    _close(client, cluster, STOP_CLOSE_TIMEOUT_S)
                raise
            except Exception:  # closing is best effort; the run's own error matters more
                if timeout is None:
                    _LOG.warning("closing %r failed", thing, exc_info=True)
    if timeout is not None and cluster is not None:
        cluster.shutdown_on_close = False


def _dask_option_names() -> frozenset[str]:
    """The names under which ``PipelineOptions`` holds ``DaskOptions`` (``address`` for
    ``--dask_client_address``...): the runner's own, not shipped to the workers (fix 6; Beam's
    ``from_dictionary`` would rebuild them as flags no parser knows, ``--address``)."""
    parser = argparse.ArgumentParser()
    DaskOptions._add_argparse_args(parser)  # each PipelineOptions class declares its options there
    return frozenset(vars(parser.parse_known_args([])[0]))


class BertprepDaskRunner(DaskRunner):
    """Beam's ``DaskRunner`` with bertprep's six fixes (see the module docstring); Dask does the work."""

    def __init__(self, client: distributed.Client | None = None):
        super().__init__()
        self._client = client  # a caller's own client (tests, notebooks): used, never closed

    def run_pipeline(self, pipeline, options):
        opts = options.view_as(DaskOptions)
        timeout = opts.timeout if isinstance(opts.timeout, (int, float)) else DEFAULT_CONNECT_TIMEOUT_S
        client, cluster, owns_client = self._client, None, self._client is None
        try:
            if client is None:
                if opts.address or opts.scheduler_file:
                    client = connect_or_explain(opts.address, opts.scheduler_file, timeout=timeout)
                else:
                    # distributed logs each scheduler / nanny / worker event at INFO (its own logging config):
                    # a local run keeps the local runner's level, warnings and errors only.
                    logging.getLogger("distributed").setLevel(logging.WARNING)
                    cluster = distributed.LocalCluster(processes=True, dashboard_address=":0")
                    client = distributed.Client(cluster)
            if cluster is None:  # (a local cluster has started its workers)
                wait_for_a_worker(client, timeout)
            npartitions = choose_npartitions(client, opts.npartitions)
            _LOG.info("Dask runner: %d partitions per collection (%s)", npartitions, client.scheduler.address)
            pipeline.replace_all(dask_overrides())
            settings = filesystems.worker_settings(options, runner_options=_dask_option_names())
            visitor = _BagVisitor(npartitions, opts.partition_size, settings)
            pipeline.visit(visitor)
            futures = compute_all_sinks(client, visitor.leaves())
            return BertprepDaskResult(
                client, futures, cluster=cluster, owns_client=owns_client, npartitions=npartitions
            )
        except BaseException as err:
            stopped = isinstance(err, KeyboardInterrupt)  # (a stop: close within its bound)
            _close(client if owns_client else None, cluster, STOP_CLOSE_TIMEOUT_S if stopped else None)
            raise
