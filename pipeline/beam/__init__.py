"""The Beam pipeline: how the stages are wired and run (``bertprep make-shards``).

In: a ``ShardsConfig`` and Beam pipeline options. Out: a published shard directory.

Entry points:
- ``session.session``: the run's worker processes, logging and Ctrl-C; its ``Session.run`` calls
  ``run.run_make_shards``, which turns the Beam arguments into the run's one ``PipelineOptions``, starts the
  runner (local workers, Dataflow, Dask), runs the graph and publishes the result. ``cli/make_shards.py``
  (with ``cli/shards_options.py`` for its options) makes these two calls.
- ``graph.build_pipeline``: the steps read -> tokenize -> bucket -> instances -> shards, with stable labels.
- ``transforms``: the DoFns and composites from input files to bucket files.
- ``heldout``: the evaluation split (whole documents) and exact dedup.
- ``dask_runner``: bertprep's adapter over Beam's ``DaskRunner`` (``--runner=DaskRunner``).
- ``dataflow``: Dataflow options and the offline dry run; ``warm_workers``: pre-started local workers;
  ``output``: what the local runner's logs and worker stderr show the user.
"""

#: ``--runner`` values that mean Dask, lower-cased (Beam's own table of short names has none).
DASK_RUNNER_NAMES = ("daskrunner", "dask", "apache_beam.runners.dask.dask_runner.daskrunner")


def dask_runner_name(name: object) -> bool:
    """Whether ``--runner`` ``name`` means Dask (``DaskRunner``, ``dask``, Beam's class path; any case).
    Importable without Dask installed."""
    return isinstance(name, str) and name.lower() in DASK_RUNNER_NAMES
