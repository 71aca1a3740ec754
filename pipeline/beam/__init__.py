"""The Beam pipeline: how the stages are wired and run (``bertprep make-shards``).

In: a ``ShardsConfig`` and Beam pipeline options. Out: a published shard directory.

Entry points:
- ``run.run_make_shards``: validates options, starts the runner (local workers, Dataflow, Dask), runs
  the graph and publishes the result; the one call ``cli/make_shards.py`` makes.
- ``graph.build_pipeline``: the steps read -> tokenize -> bucket -> instances -> shards, with stable labels.
- ``transforms``: the DoFns and composites from input files to bucket files.
- ``heldout``: the evaluation split (whole documents) and exact dedup.
- ``dataflow``: Dataflow options and the offline dry run; ``warm_workers``: pre-started local workers;
  ``output``: what the local runner's logs and worker stderr show the user.
"""
