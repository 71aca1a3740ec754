"""The make-shards pipeline graph: :func:`build_pipeline` wires the composites of ``transforms.py``,
``heldout.py`` (``--dedup``, ``--eval-fraction``) and ``shards/write.py`` into a pipeline (with the manifest
sections of the corpus controls, :func:`manifest_sections`); ``run.py`` runs it
(runner choice, staging, Dataflow) and ``dataflow.py`` builds it for a dry run. Step labels are unique and
stable (a Dataflow job and the tests name them).

Everything is written into the staging folder it is given. Errors a worker raises for the user
(``errors.MakeShardsError``, ``readers.InputError``, ``VocabError``) are also written there as one-line
records (``errors.record_error``), so that their text reaches the user unchanged from any runner and any
process.

Memory (measured with Beam 2.77, ``benchmarks/scale.md``): the local runner keeps a GroupByKey's whole input
in memory, so the ``global`` scope's shuffle of tokenized documents would grow with the corpus there (not on
Dataflow or Dask, whose shuffles spill); with the local runner the documents beyond ``--memory-budget`` wait
on disk instead (``spill.py``). The ``file`` scope has no GroupByKey of documents and stays flat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertprep.core import schema
from bertprep.pipeline import readers
from bertprep.pipeline.beam import decontamination, heldout, mixture, near_dedup
from bertprep.pipeline.beam.megatron_output import WriteMegatronDocuments
from bertprep.pipeline.beam.transforms import (
    CreateTrainingInstances,
    ProcessFilesStreaming,
    ReadDocuments,
    TokenizeDocuments,
)
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.readers.ranges import plan_ranges
from bertprep.pipeline.shards.store import BUCKETS_DIR
from bertprep.pipeline.shards.write import MergeCountsFn, WriteArrowShards, WriteManifestFn
from bertprep.pipeline.text.tokenization import Vocab


def build_pipeline(
    pipeline: beam.Pipeline,
    config: ShardsConfig,
    files: Sequence[str],
    vocab: Vocab,
    tmp_dir: str,
    spill_to: tuple[str, int] | None = None,
) -> None:
    """Add the make-shards transforms to ``pipeline``; everything is written under the staging folder
    ``tmp_dir`` (bucket files in its ``buckets/``; shards, vocab.txt and manifest.json in it).

    With ``config.dedup`` copies are dropped: in the ``global`` scope by a ``GroupByKey`` of the documents on
    their normalised text (``heldout.DropDuplicateDocuments``), in the ``file`` scope by a first pass
    (``heldout.ExactDedup``) that gives each input file the ordinals of its copies, which the readers skip.
    With ``config.eval_fraction`` the held-out documents (``heldout.is_eval_document``) go through their own
    instance creation (their own buckets: NotNext from eval documents only) to a second shard set in
    ``tmp_dir/eval/`` with its own manifest; in the ``global`` scope the tokenized documents are partitioned,
    in the ``file`` scope the streaming pass keeps one run per side.
    With ``config.dedup == "minhash"`` a first pass (``near_dedup.NearDedup``) gives each file the ordinals of
    its near-copies, in both scopes. With ``config.decontaminate`` the documents as read go through
    ``decontamination.Decontaminate`` before exact dedup (``global`` scope) or are decontaminated by the
    streaming pass as it reads them, after the first pass's dedup (``file`` scope); with ``config.sources``
    the tokenized documents are sampled per source (``mixture.SampleSources``) before the held-out split.
    Without these options the pipeline is the one made before they existed.
    ``spill_to`` (the local runner's ``(spill folder, memory budget per worker process in bytes)``): in the
    ``global`` scope without ``config.sources``, tokenized documents beyond the budget wait on disk
    (``spill.py``); the shards are the same."""
    elements, split_files = _input_elements(config, files)
    format_parts: dict[str, beam.PCollection] = {}  # side -> the Megatron parts' entries (output_format megatron)
    keys = readers.input_keys(config.inputs, files)  # what the documents' keys hash: paths relative to the inputs
    file_list = pipeline | "ListInputFiles" >> beam.Create(elements)
    shared_counts = []  # counts that both shard sets record (readers, dedup)
    plan = mixture.MixturePlan(config, files) if config.sources else None  # before anything runs: bad sources
    first_pass = _first_pass(config, file_list, tmp_dir)  # (file_index, path) -> (..., ordinals to skip)
    if first_pass is not None:
        file_list = first_pass["files"]
        shared_counts.append(first_pass["counts"])
    split = config.eval_fraction > 0
    eval_dir = FileSystems.join(tmp_dir, heldout.EVAL_DIR)
    folders = {"train": FileSystems.join(tmp_dir, BUCKETS_DIR), "eval": FileSystems.join(eval_dir, BUCKETS_DIR)}
    if config.pairing_scope == "file":  # no shuffle: one streaming pass makes both sides' runs
        made, streaming_counts = _streaming_instances(pipeline, config, file_list, tmp_dir, folders, keys)
        shared_counts.extend(streaming_counts)
    else:
        # a mixture cuts documents, Megatron's parts read them: they stay in memory
        spill_to = spill_to if plan is None and config.output_format != "megatron" else None
        made, read_counts = _global_instances(config, keys, file_list, tmp_dir, folders, split_files, plan, spill_to)
        shared_counts.extend(read_counts)
        made, format_parts = _megatron_parts(config, made, keys, {"train": tmp_dir, "eval": eval_dir}, vocab)
    if split:
        made = _with_other_side_counts(made)
    _write_shard_sets(config, vocab, made, shared_counts, format_parts, {"train": tmp_dir, "eval": eval_dir})


def _streaming_instances(
    pipeline: beam.Pipeline,
    config: ShardsConfig,
    file_list: beam.PCollection,
    tmp_dir: str,
    folders: dict[str, str],
    keys: Sequence[str],
) -> tuple[dict[str, tuple], list]:
    """The ``file`` scope: one streaming pass (``ProcessFilesStreaming``, no shuffle) reads each file, with
    ``config.decontaminate`` decontaminates its documents against the evaluation n-grams (``BuildNgramTable``,
    a side input), and writes both sides' bucket runs to ``folders`` (side -> bucket folder). Returns
    ``(made, shared_counts)``: side -> (bucket metas, [counts of that side's instances]), ``eval`` only with
    ``config.eval_fraction``, and the counts both sides record (the n-gram table's)."""
    shared_counts = []
    table = None
    if config.decontaminate:  # the evaluation n-grams reach the reading step as a side input
        built = pipeline | "BuildNgramTable" >> decontamination.BuildNgramTable(config, tmp_dir)
        table = built["table"]
        shared_counts.append(built["counts"])
    result = file_list | "ProcessFilesStreaming" >> ProcessFilesStreaming(
        config, folders["train"], folders["eval"], table, keys
    )
    made = {"train": (result.buckets, [result.counts])}  # side -> (bucket metas, [counts of its instances])
    if config.eval_fraction > 0:
        made["eval"] = (result.eval_buckets, [result.eval_counts])
    return made, shared_counts


def _write_shard_sets(
    config: ShardsConfig,
    vocab: Vocab,
    made: dict[str, tuple],
    shared_counts: list,
    format_parts: dict[str, beam.PCollection],
    side_dirs: dict[str, str],
) -> None:
    """Each side's shard set (``WriteArrowShards``): its shards, vocab.txt and manifest.json in its staging
    folder (``side_dirs``: side -> folder). ``made``: side -> (bucket metas, [counts of that side's
    instances]); each manifest records ``shared_counts`` then its side's counts; ``format_parts``: side -> its
    Megatron parts' entries (``--output-format megatron``; else empty). The eval set gets one shard per
    ~50,000 rows (``num_shards=0``)."""
    vocab_info = _vocab_info(config, vocab)
    for side, (side_buckets, side_counts) in made.items():
        train = side == "train"
        counts = (
            tuple(shared_counts + side_counts) | ("FlattenCounts" if train else "FlattenEvalCounts") >> beam.Flatten()
        )
        manifest = WriteManifestFn(
            config if train else dataclasses.replace(config, num_shards=0),  # eval: one shard per ~50,000 rows
            vocab_info,
            list(vocab.tokens),
            side_dirs[side],
            role=side,
            vocab_files=vocab.files(),
            manifest_sections=manifest_sections,
        )
        written = (side_buckets, counts, format_parts[side]) if side in format_parts else (side_buckets, counts)
        written | ("WriteArrowShards" if train else "WriteEvalShards") >> WriteArrowShards(manifest)


#: How a document is named in the hashes that place it (bucket, held-out side, mixture draw): the manifest's
#: ``document_id``. The path is relative to the input's root (``readers.input_keys``), so that the same corpus
#: in another folder or in a bucket gives the same shards.
DOCUMENT_ID = (
    "<path>:<ordinal>: the input file's path relative to the innermost root of the inputs (a folder or "
    "prefix, a glob's part before its first wildcard up to its last '/', a file's folder; '#n' added to the n-th "
    "file of the same relative path) and the document's index in the file"
)


def manifest_sections(config: ShardsConfig, counts: dict, role: str) -> dict:
    """The manifest's sections of the corpus controls, in this order: ``document_id`` (:data:`DOCUMENT_ID`),
    ``split`` and ``dedup``
    (``heldout.manifest_sections``, with MinHash's settings from ``near_dedup`` under ``--dedup minhash``), the
    mixture's (``mixture.manifest_section``) and decontamination's; each absent where its option is not used.
    ``WriteArrowShards`` adds them to each shard set's manifest (``role``: ``train`` or ``eval``)."""
    sections: dict[str, Any] = {"document_id": DOCUMENT_ID}
    sections.update(heldout.manifest_sections(config, counts, role))
    if "dedup" in sections and config.dedup == "minhash":
        sections["dedup"].update(near_dedup.manifest_details(config))
    sections.update(mixture.manifest_section(config, counts))
    sections.update(decontamination.manifest_section(config, counts))
    return sections


def _vocab_info(config: ShardsConfig, vocab: Vocab) -> dict:
    """The manifest's ``vocab`` entry (``schema.vocab_entry`` for a BPE / Unigram tokenizer)."""
    if vocab.pretrained is not None:
        return schema.vocab_entry(vocab.pretrained, config.vocab, vocab.size, vocab.sha256)
    vocab_info = {
        "file": "vocab.txt",
        "source": config.vocab,
        "size": vocab.size,
        "sha256": vocab.sha256,
        "do_lower_case": config.do_lower_case,
        "special_token_ids": vocab.special_token_ids(),
    }
    if config.effective_strip_accents != config.do_lower_case:  # absent: the same as do_lower_case
        vocab_info["strip_accents"] = config.effective_strip_accents
    return vocab_info


def _input_elements(config: ShardsConfig, files: Sequence[str]) -> tuple[list[tuple], bool]:
    """The elements the pipeline starts from, and whether a file was cut into byte ranges.

    Create reshuffles its elements itself when there are several, so the files spread over the workers. In the
    global scope a large file is read in byte ranges (readers.ranges), each an element: (file_index, path,
    range_index, start, end); its documents keep their ids (ordinals in the file, TokenizeDocuments). The file
    scope makes a file's buckets of its documents in order, which needs the whole file: one element per file
    ``(file_index, path)``. --dedup minhash hands each whole file its list of documents to skip: its files are
    read whole."""
    if config.pairing_scope == "global" and config.split_bytes and config.dedup != "minhash":
        elements = plan_ranges(files, config.split_bytes)
        return elements, any(element[2] for element in elements)
    return list(enumerate(files)), False


def _first_pass(config: ShardsConfig, file_list: beam.PCollection, tmp_dir: str) -> dict | None:
    """The pass over the files before the documents are read, where an option needs one: ``NearDedup``
    (``--dedup minhash``) or ``ExactDedup`` (``--dedup exact`` in the ``file`` scope); its ``files`` carry each
    file's ordinals to skip, its ``counts`` go to the manifests. None: no first pass."""
    if config.dedup == "minhash":
        return file_list | "NearDedup" >> near_dedup.NearDedup(config, tmp_dir)
    if config.dedup == "exact" and config.pairing_scope == "file":
        return file_list | "ExactDedup" >> heldout.ExactDedup(config, tmp_dir)
    return None


def _global_instances(
    config: ShardsConfig,
    keys: Sequence[str],
    file_list: beam.PCollection,
    tmp_dir: str,
    folders: dict[str, str],
    split_files: bool,
    plan: mixture.MixturePlan | None,
    spill_to: tuple[str, int] | None = None,
) -> tuple[dict[str, tuple], list]:
    """The ``global`` scope: documents read, (optionally) decontaminated, deduplicated, tokenized, sampled per
    source and split into the held-out side, then each side's instances in its bucket folder. Returns
    ``(made, shared_counts)``: side -> (bucket metas, [counts of that side's instances], its tokenized
    documents), and the counts both
    sides record (decontamination, dedup, the readers', the mixture's, in that order). ``keys``: the input
    files' paths as the documents' keys hash them (``readers.input_keys``)."""
    shared_counts = []
    read = file_list | "ReadDocuments" >> ReadDocuments(config, tmp_dir)
    documents = read.documents
    if config.decontaminate:  # documents overlapping evaluation sets dropped or cut
        cleaned = documents | "Decontaminate" >> decontamination.Decontaminate(config, tmp_dir)
        documents = cleaned["documents"]
        shared_counts.append(cleaned["counts"])
    if config.dedup == "exact":  # the first copy of each normalised text goes on
        deduped = documents | "DropDuplicateDocuments" >> heldout.DropDuplicateDocuments(config)
        documents = deduped["documents"]
        shared_counts.append(deduped["counts"])
    tokenized = documents | "TokenizeDocuments" >> TokenizeDocuments(
        config, read.ranges if split_files else None, spill_to, tmp_dir
    )
    shared_counts.append(read.counts)
    if plan is not None:  # each source's documents 0, 1 or more times (copies: distinct ids, same side)
        sampled = tokenized | "SampleSources" >> mixture.SampleSources(keys, plan, config.instance.random_seed)
        tokenized = sampled["documents"]
        shared_counts.append(sampled["counts"])
    parts = {"train": tokenized}
    if config.eval_fraction > 0:
        parts["train"], parts["eval"] = tokenized | "SplitHeldOut" >> beam.Partition(
            # (Beam's type comment says a PartitionFn; Partition takes "a PartitionFn, or a callable" and wraps it)
            heldout.SplitSide(keys, config.eval_fraction, config.eval_seed),  # type: ignore[arg-type]
            2,
        )
    made = {}
    for side, docs in parts.items():
        label = "CreateTrainingInstances" if side == "train" else "CreateEvalInstances"
        sources = None if plan is None else (plan.file_source, plan.names)  # instances counted per source
        result = docs | label >> CreateTrainingInstances(config, keys, folders[side], sources)
        made[side] = (result.buckets, [result.counts], docs)
    return made, shared_counts


def _megatron_parts(
    config: ShardsConfig, made: dict[str, tuple], keys: Sequence[str], side_dirs: dict[str, str], vocab: Vocab
) -> tuple[dict[str, tuple], dict[str, beam.PCollection]]:
    """``made`` (side -> (bucket metas, counts, tokenized documents)) without the documents, and with
    ``--output-format megatron`` each side's documents -> its Megatron parts in that side's staging folder
    (``megatron_output.py``): side -> the parts' entries (else none)."""
    parts = {}
    if config.output_format == "megatron":
        parts = {
            side: docs
            | ("WriteMegatronDocuments" if side == "train" else "WriteEvalMegatronDocuments")
            >> WriteMegatronDocuments(side_dirs[side], keys, len(vocab.tokens))
            for side, (_, _, docs) in made.items()
        }
    return {side: (side_buckets, counts) for side, (side_buckets, counts, _) in made.items()}, parts


def _with_other_side_counts(made: dict[str, tuple]) -> dict[str, tuple]:
    """Each manifest records both sides' document counts: ``made`` (side -> (bucket metas, [counts])) with each
    side's counts followed by its own document counts, the other side's, and the documents the other side
    skipped."""
    per_side = {}
    for side in heldout.SIDES:
        name = side.capitalize()
        merged = (
            tuple(made[side][1])
            | f"Flatten{name}OnlyCounts" >> beam.Flatten()
            | f"Merge{name}OnlyCounts" >> beam.CombineGlobally(MergeCountsFn())
        )
        per_side[side] = (
            merged | f"Count{name}Documents" >> beam.Map(lambda c, s=side: heldout.split_counts(s, c)),
            merged | f"Skip{name}Documents" >> beam.Map(lambda c, s=side: heldout.skipped_for_other_side(s, c)),
        )
    other = {"train": "eval", "eval": "train"}
    return {
        side: (buckets, [*counts, per_side[side][0], *per_side[other[side]]])
        for side, (buckets, counts) in made.items()
    }
