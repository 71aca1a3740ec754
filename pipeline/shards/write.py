"""``make-shards``' last step, :class:`WriteArrowShards`: bucket files -> balanced Arrow shards -> ``manifest.json``,
all in the run's staging folder.

Shards are planned from the bucket sizes and written by hand rather than with ``fileio.WriteToFiles`` (Beam's sink,
which the project prefers where the output allows): each shard takes an exact, balanced row range across bucket
files, and its name and sha256 go into the manifest, which ``WriteToFiles``' sharding does not give. The planning
and the writing are plain functions of ``shards.py``; here are the DoFns that call them (:class:`WriteShardFn`, one
per shard, and :class:`WriteManifestFn`, which deletes the bucket files and writes vocab.txt, then the manifest
last), :class:`MergeCountsFn` (the counts every step emits, summed for the manifest's statistics) and the composite.
The manifest's sections of the corpus controls (split, dedup, mixture, decontamination) are handed in by
``beam/graph.py`` (``manifest_sections``): this module imports nothing of ``beam/``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from bertprep.core import atomic, schema
from bertprep.pipeline.config import ShardsConfig
from bertprep.pipeline.errors import MakeShardsError, record_error, records_errors
from bertprep.pipeline.shards import formats
from bertprep.pipeline.shards import store as shards
from bertprep.pipeline.shards.store import BUCKETS_DIR

log = logging.getLogger(__name__)

#: bertprep's version, recorded in the manifest (``created_by``).
__version__ = "0.1.0"

#: ``(config, merged counts, role) -> manifest sections``: what a run adds to its manifest besides the shards
#: (``beam/graph.manifest_sections``); None adds nothing.
ManifestSections = Callable[[ShardsConfig, dict, str], dict]


class MergeCountsFn(beam.CombineFn):
    """Sums count dicts (numbers add, dicts merge) into one."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, acc: dict, element: dict) -> dict:
        return shards.merge_counts(acc, element)

    def merge_accumulators(self, accs: Iterable[dict]) -> dict:
        out: dict = {}
        for acc in accs:
            out = shards.merge_counts(out, acc)
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc


def _plan(
    bucket_metas: list[tuple[int, str, int]],
    num_shards: int,
    error_dir: str | None = None,
    eval_fraction: float | None = None,
    train_beside_eval_fraction: float | None = None,
) -> list[shards.ShardPlan]:
    """The shards' plan of one set; ``eval_fraction``: this is the held-out set of that fraction;
    ``train_beside_eval_fraction``: this is the training set of a run that holds that fraction out."""
    try:
        empty = not sum(rows for _, _, rows in bucket_metas)
        if eval_fraction is not None and empty:
            raise MakeShardsError(
                f"bertprep: --eval-fraction {eval_fraction} held out no document that makes an instance, so "
                f"{schema.EVAL_DIR}/ would be empty; raise --eval-fraction (or add input)"
            )
        if train_beside_eval_fraction and empty:  # it said "every document was empty or skipped"
            raise MakeShardsError(
                f"bertprep: no training instances were made: --eval-fraction {train_beside_eval_fraction} held out "
                "every document that makes one (the split is by whole documents; see the counts logged above); "
                "lower --eval-fraction, or add input"
            )
        return _plan_shards(bucket_metas, num_shards)
    except MakeShardsError as err:
        record_error(error_dir, err)
        raise


def _plan_shards(bucket_metas: list[tuple[int, str, int]], num_shards: int) -> list[shards.ShardPlan]:
    total = sum(rows for _, _, rows in bucket_metas)
    if total == 0:
        raise MakeShardsError(
            "bertprep: no instances were made: every document was empty or skipped (see the counts "
            "logged above); check --input-format and that the input has documents separated by blank lines"
        )
    n = shards.choose_num_shards(total, num_shards)
    if n > total:
        raise MakeShardsError(f"bertprep: --num-shards {n} is more than the {total} instances made; use fewer shards")
    return shards.plan_shards(bucket_metas, n)


class WriteShardFn(beam.DoFn):
    """A :class:`shards.ShardPlan` -> the shard file in ``output_dir`` (the staging folder) -> its manifest entry."""

    def __init__(
        self,
        output_dir: str,
        vocab_size: int,
        objective: str = "nsp",
        word_ids: bool = False,
        config: ShardsConfig | None = None,
    ):
        self.output_dir = output_dir
        self.vocab_size = vocab_size
        self.objective = objective
        self.word_ids = word_ids
        self.config = config  # its output_format ``mds``: the shard is an MDS sub-folder (``formats.py``)

    @records_errors("output_dir")
    def process(self, plan: shards.ShardPlan) -> Iterator[dict]:
        name = schema.shard_name(plan.index, plan.count)
        args = (self.output_dir, plan, self.vocab_size, self.objective, self.word_ids)
        try:
            if self.config is not None and self.config.output_format == "mds":
                config = self.config
                entry = formats.write_mds_shard(
                    *args, config.mds_compression, config.mds_hashes, masked=config.masking == "static"
                )
            else:
                entry = shards.write_shard(*args)
        except OSError as err:
            raise MakeShardsError(shards.os_error_message(err, f"writing shard {name} (in {self.output_dir})")) from err
        log.info("wrote %s: %d rows", entry["file"], entry["rows"])
        yield entry


class WriteManifestFn(beam.DoFn):
    """Last step: delete the temporary bucket files, write vocab.txt and then manifest.json into the
    staging folder ``tmp_dir`` (:func:`run_make_shards` moves them into the output directory). ``role``:
    ``train``, or ``eval`` for the held-out set; ``vocab_files``: the tokenizer files to copy beside the shards
    (a BPE / Unigram tokenizer's), None: ``vocab.txt`` of ``vocab_tokens``; ``manifest_sections``: the run's
    sections besides the shards' (:data:`ManifestSections`). :class:`WriteArrowShards` takes its settings from
    this DoFn."""

    def __init__(
        self,
        config: ShardsConfig,
        vocab_info: dict,
        vocab_tokens: list[str],
        tmp_dir: str,
        role: str = "train",
        vocab_files: dict[str, str] | None = None,
        manifest_sections: ManifestSections | None = None,
    ):
        self.config = config
        self.vocab_info = vocab_info
        self.vocab_tokens = vocab_tokens
        self.tmp_dir = tmp_dir
        self.role = role
        self.vocab_files = vocab_files
        self.manifest_sections = manifest_sections

    @records_errors("tmp_dir")
    def process(self, shard_entries: list[dict], counts: dict, format_parts: Iterable[dict] = ()) -> Iterator[str]:
        log.info("writing %s (%d shards)", schema.MANIFEST_NAME, len(shard_entries))
        entries = sorted(shard_entries, key=lambda e: e["file"])
        counts = dict(counts)
        counts["max_seq_length"] = self.config.instance.max_seq_length
        counts["objective"] = self.config.instance.objective
        statistics = shards.summarize_statistics(counts)
        rows = sum(e["rows"] for e in entries)
        if rows != statistics["instances"]:
            raise MakeShardsError(
                f"bertprep: internal error: shards hold {rows} rows, buckets made {statistics['instances']}"
            )
        try:
            shards.copy_vocab(self.tmp_dir, self.vocab_tokens, self.vocab_files)
        except OSError as err:
            raise MakeShardsError(shards.os_error_message(err, f"writing the vocab (in {self.tmp_dir})")) from err
        shards.remove_tree(FileSystems.join(self.tmp_dir, BUCKETS_DIR))
        vocab_size = len(self.vocab_tokens)
        manifest = {
            "format_version": schema.FORMAT_VERSION,
            "created_by": f"bertprep {__version__}",
            "config": self.config.to_dict() | {"masking": self.config.masking},
            "vocab": self.vocab_info,
            "schema": schema.manifest_schema(vocab_size, self.config.instance.objective, self.config.writes_word_ids),
            "shards": entries,
            "statistics": statistics,
        }
        if self.manifest_sections is not None:
            manifest.update(self.manifest_sections(self.config, counts, self.role))
        try:
            manifest.update(self._format_files(entries, manifest, list(format_parts)))
            yield shards.write_manifest(self.tmp_dir, manifest)
        except OSError as err:
            raise MakeShardsError(shards.os_error_message(err, f"writing manifest.json (in {self.tmp_dir})")) from err

    def _format_files(self, entries: list[dict], manifest: dict, format_parts: list[dict]) -> dict:
        """The output format's files besides the shards, written into the staging folder: the merged MDS index
        (``mds``), the Megatron dataset merged from ``format_parts`` (``megatron``: the parts' entries,
        ``formats.write_megatron_part``), or the dataset card (``arrow``, training set); the manifest's entries
        that record them."""
        output_format = self.config.output_format
        if output_format == "mds":
            index = formats.merge_mds_index(self.tmp_dir, entries)
            return {"output_format": output_format, "format_files": [index]}
        if output_format == "megatron":
            return formats.megatron_manifest(self.tmp_dir, format_parts, len(self.vocab_tokens))
        if output_format == "arrow" and self.role == "train":
            card = formats.dataset_card(manifest, self.config.eval_fraction > 0)
            path = FileSystems.join(self.tmp_dir, formats.DATASET_CARD)
            atomic.check_staging_alive(path)
            with FileSystems.create(path) as f:
                f.write(card.encode("utf-8"))
            return {"dataset_card": formats.DATASET_CARD}
        return {}


class WriteArrowShards(beam.PTransform):
    """Bucket file metas -> balanced Arrow shards -> manifest.json (written last), all in the staging
    folder ``manifest.tmp_dir``: ``manifest``, the :class:`WriteManifestFn` that ends it, holds the run's config,
    vocab, staging folder, role (``train``, or ``eval`` for the held-out set) and manifest sections."""

    def __init__(self, manifest: WriteManifestFn):
        super().__init__()
        self.manifest = manifest

    def expand(self, pcolls):
        bucket_metas, counts, *format_parts = pcolls  # format_parts: the Megatron parts' entries, if any
        config, tmp_dir, role = self.manifest.config, self.manifest.tmp_dir, self.manifest.role
        merged_counts = counts | "MergeCounts" >> beam.CombineGlobally(MergeCountsFn())
        plans = (
            bucket_metas
            | "CollectBuckets" >> beam.combiners.ToList()
            | "PlanShards"
            >> beam.FlatMap(
                _plan,
                config.num_shards,
                tmp_dir,
                config.eval_fraction if role == "eval" else None,
                config.eval_fraction if role == "train" else None,
            )
            | "SpreadShards" >> beam.Reshuffle()
        )
        entries = (
            plans
            | "WriteShardFn"
            >> beam.ParDo(
                WriteShardFn(
                    tmp_dir,
                    len(self.manifest.vocab_tokens),
                    config.instance.objective,
                    config.writes_word_ids,
                    config,
                )
            )
            | "CollectShards" >> beam.combiners.ToList()
        )
        side = {"format_parts": beam.pvalue.AsList(format_parts[0])} if format_parts else {}
        return entries | "WriteManifestFn" >> beam.ParDo(
            self.manifest, counts=beam.pvalue.AsSingleton(merged_counts), **side
        )
