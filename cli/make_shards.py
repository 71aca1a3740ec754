"""``bertprep make-shards``: options -> :class:`ShardsConfig` -> :func:`run_make_shards`."""

from __future__ import annotations

import click

from bertprep.cli.options import (
    casing_options,
    field_help,
    field_option,
    inputs_option,
    masked_lm_prob_option,
    max_seq_length_option,
    output_dir_option,
    overwrite_option,
    quiet_option,
    reader_options,
)
from bertprep.pipeline.config import (
    DECONTAMINATE_MODES,
    DEDUP_MODES,
    MASKING_MODES,
    MIN_SPLIT_BYTES,
    OBJECTIVES,
    OUTPUT_FORMATS,
    PAIRING_SCOPES,
    SAMPLING_MODES,
    InstanceConfig,
    ShardsConfig,
)
from bertprep.pipeline.instances.buckets import MIN_DOCUMENTS_PER_BUCKET
from bertprep.pipeline.masking.config import MASKING_SCHEMES, MaskingConfig


def _option(name: str, *decls: str, **attrs):
    """``field_option`` of the make-shards setting ``name``: its default and help (the field's docstring) from
    whichever of ``MaskingConfig``, ``InstanceConfig`` and ``ShardsConfig`` declares it, the default shown.
    Defaults, help and choices come from the library's dataclasses and constants, never restated here."""
    config = next(c for c in (MaskingConfig, InstanceConfig, ShardsConfig) if name in c.__dataclass_fields__)
    attrs.setdefault("show_default", True)
    return field_option(config, name, *decls, **attrs)


def _local_vocab(value: str | None) -> str | None:
    """``--vocab``: a Hugging Face Hub id becomes its cached snapshot directory (``core.hub``)."""
    from bertprep.core.hub import HubError, resolve_model_dir

    try:
        return resolve_model_dir(value) if value else value
    except HubError as err:
        raise click.BadParameter(str(err), param_hint="--vocab") from None


def _check_split_bytes(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """Refuse a --split-bytes below ``MIN_SPLIT_BYTES`` (but 0): a range per byte or per KB never ends."""
    if 0 < value < MIN_SPLIT_BYTES:
        raise click.BadParameter(
            f"{value:,} bytes per range is below the floor of {MIN_SPLIT_BYTES:,} (1 MiB): each range is a task "
            "that opens and seeks the file, so smaller ranges cost more than they spread; give at least 1 MiB, "
            "or 0 to read every file whole",
            ctx,
            param,
        )
    return value


@click.command(
    "make-shards",
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
    },
)
@inputs_option(
    "Input files: comma-separated globs, files or directories (repeatable; local or gs://...). "
    "Files are read in glob order, sorted within each pattern, patterns in the order given. "
    "Default: the bundled demo corpus (three public-domain books)."
)
@click.option(
    "--vocab",
    "--vocab-file",
    "vocab",
    required=True,
    metavar="PATH",
    help="The tokenizer: a WordPiece vocab.txt (one token per line, ours or Google's), a Hugging Face "
    "tokenizer.json of any model type (WordPiece; BPE as RoBERTa and ModernBERT; Unigram as XLM-R), or a local "
    "model or build-vocab directory holding one (its tokenizer_config.json names the special tokens: <s> for "
    "[CLS], </s> for [SEP], <mask> for [MASK]), or a Hugging Face Hub id (answerdotai/ModernBERT-base, "
    "roberta-base: its tokenizer from huggingface_hub's cache; HF_HUB_OFFLINE=1 reads the cache only). A BPE / "
    "Unigram tokenizer normalises text itself: --do-lower-case and --strip-accents do not apply.",
    callback=lambda ctx, param, value: _local_vocab(value),
)
@output_dir_option(metavar="DIR")
@casing_options()
@max_seq_length_option(type=int, default=InstanceConfig.max_seq_length, show_default=True)
@_option("max_predictions_per_seq", type=int)
@masked_lm_prob_option(type=float, default=MaskingConfig.masked_lm_prob, show_default=True)
@_option("short_seq_prob", type=float)
@_option("dupe_factor", type=int)
@_option("random_seed", type=int)
@_option("do_whole_word_mask", "--do-whole-word-mask/--no-do-whole-word-mask")
@_option("masking_scheme", type=click.Choice(MASKING_SCHEMES))
@_option("max_ngram_size", type=click.IntRange(min=1))
@_option("span_geometric_p", type=click.FloatRange(0, 1, min_open=True))
@_option("max_span_length", type=click.IntRange(min=1))
@_option("word_segmenter", metavar="MODULE:CALLABLE")
@_option("word_ids", "--word-ids/--no-word-ids")
@_option("objective", type=click.Choice(OBJECTIVES))
@reader_options()
@_option("pairing_scope", type=click.Choice(PAIRING_SCOPES))
@_option(
    "bucket_tokens",
    type=click.IntRange(min=1),
    help=f"{field_help(ShardsConfig, 'bucket_tokens')} There are never so many buckets that they average fewer "
    f"than {MIN_DOCUMENTS_PER_BUCKET} documents.",
)
@_option("bucket_size", type=click.IntRange(min=0))
@_option("num_shards", type=int)
@_option("masking", type=click.Choice(MASKING_MODES))
@_option("sampling", type=click.Choice(SAMPLING_MODES))
@_option("eval_fraction", type=click.FloatRange(0, 1, max_open=True))
@_option("eval_seed", type=click.IntRange(0, 2**32 - 1))
@_option("memory_budget", type=click.IntRange(min=0), metavar="MB")
@_option(
    "split_bytes",
    type=click.IntRange(min=0),
    callback=_check_split_bytes,
    help=f"{field_help(ShardsConfig, 'split_bytes')} At least {MIN_SPLIT_BYTES:,} (1 MiB) besides 0.",
)
@_option("output_format", type=click.Choice(OUTPUT_FORMATS))
@_option("mds_compression", metavar="NAME")
@_option(
    "mds_hashes",
    metavar="NAMES",
    default=None,  # (none: the config's default, no hashes)
    show_default=False,
    help=f"{field_help(ShardsConfig, 'mds_hashes')} Comma-separated.",
)
@_option("dedup", type=click.Choice(DEDUP_MODES))
@_option("dedup_threshold", type=click.FloatRange(0, 1, min_open=True))
@_option("dedup_ngram", type=click.IntRange(min=1))
@click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="NAME=GLOBS[:WEIGHT]",
    help="A source of a weighted mixture, instead of -i (repeatable): its name, its comma-separated "
    "globs, and a sampling rate (default 1) that multiplies the source's word pieces: 2 writes every "
    "document twice; 0.5 keeps half of the word pieces, whole documents in the order of a stable "
    "hash of (--random-seed, source, document) and the last one cut at a sentence; 1.5 every "
    "document once plus such a half. The same on any runner. Copies are distinct documents (own "
    "buckets, own masks) on the held-out side of their original; --dedup runs before sampling. The "
    "manifest records each source's size, rate and realised shares of word pieces and instances "
    "(bertprep inspect prints them). --pairing-scope global only.",
)
@click.option(
    "--mixture",
    default=None,
    metavar="FILE.json",
    help='Sources from a JSON file: {"sources": [{"name": ..., "inputs": [globs] or "globs", '
    '"weight": rate}], "temperature_alpha": optional}; instead of --source.',
)
@_option("mixture_alpha", type=click.FloatRange(0, 1))
@_option(
    "decontaminate",
    multiple=True,
    metavar="FILES",
    show_default=False,
    help=f"{field_help(ShardsConfig, 'decontaminate')} Repeatable; each value may hold several, comma-separated.",
)
@_option("decontaminate_ngram", type=click.IntRange(min=1))
@_option("decontaminate_mode", type=click.Choice(DECONTAMINATE_MODES))
@overwrite_option()
@quiet_option()
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
def make_shards(beam_args, quiet, **options):
    """Turn documents into masked BERT pre-training instances, written as Arrow shards.

    Runs the original generator's algorithm (google-research/bert create_pretraining_data.py: document-level
    sentence pairs, 50% NotNext, 15% masking with 80/10/10) as an Apache Beam pipeline. Any option not
    listed here goes to Beam, e.g.

    \b
      bertprep make-shards -i 'corpus/*.txt' --vocab vocab.txt -o shards/
      bertprep make-shards -i gs://b/corpus/ --vocab gs://b/vocab.txt -o gs://b/shards \\
          --runner=DataflowRunner --project=P --region=us-central1 \\
          --temp_location=gs://b/tmp --setup_file=./setup.py

    Without --runner it runs locally on every core. Output: shard-NNNNN-of-MMMMM.arrow files, vocab.txt, a
    dataset card README.md (datasets.load_dataset(DIR) loads them) and manifest.json (written last: a directory
    without it is incomplete); --output-format mds or megatron writes the same data for Composer or Megatron-LM.
    See `bertprep inspect`.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.cli.shards_options import check_beam_args, shards_config
    from bertprep.pipeline.beam.filesystems import use_filesystem_options
    from bertprep.pipeline.beam.session import INTERRUPTED_STATUS, Interrupted, session

    ctx = click.get_current_context()
    explicit = frozenset(
        name for name in options if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    )
    beam_args = beam_args or _in_process_args(options)
    try:
        with session(beam_args, quiet=quiet) as run_session:
            check_beam_args(ctx, beam_args)  # after the session's logging set-up: Beam's parser logs via root
            use_filesystem_options(PipelineOptions(list(beam_args)))  # s3:// needs them before the vocab is read
            config, vocab, warnings = shards_config(options, explicit)
            for warning in warnings:
                click.echo(warning if warning.startswith("No -i/--input") else f"Warning: {warning}", err=True)
            try:
                manifest = run_session.run(config, beam_args, vocab=vocab)
            except Exception as err:
                from bertprep.pipeline.beam.output import is_user_error

                if is_user_error(err):
                    raise click.ClickException(str(err)) from err
                raise
            finally:
                if run_session.kept_log:
                    click.echo(f"(the worker processes' output is in {run_session.kept_log})", err=True)
    except Interrupted as err:  # SIGINT / SIGTERM: one line, exit status 130
        click.echo(str(err), err=True)
        raise SystemExit(INTERRUPTED_STATUS) from None
    _echo_outcome(manifest, config.output_dir)


def _in_process_args(options: dict) -> tuple[str, ...]:
    """The Beam arguments of a run given none: with ``-i`` inputs (or the demo corpus) and no ``--sources`` /
    ``--mixture``, the small-input settings that run it in this process (``run.in_process_args``: worker
    processes would cost more than its work); else none (``()``: every core)."""
    if options.get("sources") or options.get("mixture"):
        return ()
    from bertprep.cli.shards_options import split_inputs
    from bertprep.pipeline import demo_corpus_dir
    from bertprep.pipeline.beam.run import in_process_args

    inputs = split_inputs(options.get("input_files") or ()) or (demo_corpus_dir(),)
    return tuple(in_process_args(inputs, options["dupe_factor"]))


def _echo_outcome(manifest: dict, output_dir: str) -> None:
    """Print what the run did: a dry run's plan, the summary of the shards written (``format_summary``), or
    where they are when the runner returned no manifest."""
    if "dry_run" in manifest:
        click.echo(manifest["dry_run"])
    elif manifest:
        from bertprep.pipeline.shards.inspection import format_summary

        click.echo(format_summary(manifest, output_dir))
    else:
        click.echo(f"Shards written to {output_dir} (manifest.json)")
