"""Shard stage: instances -> Arrow IPC shards and ``manifest.json``; reading, inspecting, verifying them.

In: bucket files of instances. Out: ``shard-NNNNN-of-MMMMM.arrow``, ``vocab.txt`` and ``manifest.json``
(written last: a directory without it is incomplete). The format is ``bertprep.core.schema``.

Entry points:
- ``store``: plain pyarrow/numpy: shard planning, writing (over Beam's ``FileSystems``, on the pipeline's
  workers), statistics, the output folder's listing and clean-up (over ``core/storage.py``, in make-shards'
  own process).
- ``publish``: the journalled publish of a finished run's staging folder (over ``core/storage.py``).
- ``write``: the Beam composite ``WriteArrowShards`` and the manifest DoFns.
- ``inspection``: ``bertprep inspect`` (summary, decoded examples, ``--verify``).
"""
