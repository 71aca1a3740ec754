"""``pipeline/beam/graph.py``: the graph :func:`build_pipeline` builds for each pairing scope, with and without
``--dedup`` and ``--eval-fraction``, read from the pipeline before it runs. Its step labels are stable (a
Dataflow job and its monitoring name them); what the graph makes is tested by running it (``test_pipeline.py``,
``test_heldout.py``, ``test_golden.py``)."""

from __future__ import annotations

import apache_beam as beam
import pytest

from bertprep.pipeline.beam.graph import build_pipeline
from bertprep.pipeline.text.tokenization import load_vocab
from pipeline_factory import FILES, VOCAB, shards_config

GLOBAL_STEPS = {
    "ListInputFiles",
    "ReadDocuments",
    "TokenizeDocuments",
    "CreateTrainingInstances",
    "FlattenCounts",
    "WriteArrowShards",
}


def _top_level_steps(**kw) -> set[str]:
    pipeline = beam.Pipeline()  # built, never run
    build_pipeline(pipeline, shards_config(**kw), FILES, load_vocab(VOCAB), "unused-staging")
    proto = pipeline.to_runner_api()
    transforms = proto.components.transforms
    (root,) = proto.root_transform_ids
    return {transforms[step].unique_name for step in transforms[root].subtransforms}


def test_global_scope_reads_tokenizes_groups_and_writes():
    assert _top_level_steps() == GLOBAL_STEPS


def test_file_scope_is_one_streaming_pass_with_no_grouping_of_documents():
    assert _top_level_steps(pairing_scope="file") == {
        "ListInputFiles",
        "ProcessFilesStreaming",
        "FlattenCounts",
        "WriteArrowShards",
    }


@pytest.mark.parametrize("pairing_scope", ["global", "file"])
def test_eval_fraction_adds_a_second_shard_set_and_dedup_its_pass(pairing_scope):
    steps = _top_level_steps(pairing_scope=pairing_scope, eval_fraction=0.2, dedup="exact")
    assert {"WriteArrowShards", "WriteEvalShards", "FlattenEvalCounts"} <= steps
    if pairing_scope == "global":
        assert {"DropDuplicateDocuments", "SplitHeldOut", "CreateTrainingInstances", "CreateEvalInstances"} <= steps
    else:
        assert {"ExactDedup", "ProcessFilesStreaming"} <= steps and "CreateTrainingInstances" not in steps
