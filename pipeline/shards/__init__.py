"""Shard stage: instances -> Arrow IPC shards and ``manifest.json``; reading, inspecting, verifying them.

In: bucket files of instances. Out: ``shard-NNNNN-of-MMMMM.arrow``, ``vocab.txt`` and ``manifest.json``
(written last: a directory without it is incomplete). The format is ``bertprep.core.schema``.

Entry points:
- ``store``: plain pyarrow/numpy over Beam's ``FileSystems`` (so ``gs://`` works): shard planning,
  writing, publishing, statistics.
- ``write``: the Beam composite ``WriteArrowShards`` and the manifest DoFns.
- ``inspection``: ``bertprep inspect`` (summary, decoded examples, ``--verify``).
"""
