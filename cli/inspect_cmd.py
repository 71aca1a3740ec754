"""``bertprep inspect DIR``: statistics of a shard directory and decoded instances; ``DIR`` local or a bucket's
``gs://`` / ``s3://`` URL (read as ``train`` reads it, through the shard cache: ``remote_shards.open_cache``)."""

from __future__ import annotations

import itertools

import click

from bertprep.cli.options import verify_option


def _shard_dir(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A local folder that exists (click's own check and message), or a bucket's URL as given."""
    from bertprep.core import storage

    if storage.is_remote(value):
        return value
    return str(click.Path(exists=True, file_okay=False).convert(storage.local_path(value), param, ctx))


@click.command("inspect", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("shard_dir", callback=_shard_dir)
@click.option(
    "-n",
    "--num-examples",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="How many instances to decode back to text.",
)
@click.option(
    "--skip",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Start decoding after this many rows (in shard order).",
)
@click.option("--stats/--no-stats", default=True, show_default=True, help="Print the manifest statistics.")
@verify_option(is_flag=True)
def inspect_shards(shard_dir: str, num_examples: int, skip: int, stats: bool, verify: bool) -> None:
    """Print the statistics of a finished shard directory and decode instances back to text.

    SHARD_DIR may be a bucket's gs:// or s3:// URL (the cloud extra): its manifest is read from the bucket and
    the shards the command reads are fetched into train's shard cache ($XDG_CACHE_HOME/bertprep/shards),
    each checked against the manifest's sha256.

    Masked positions are shown as {shown→label}: {[MASK]→cat} (80% of predictions), {dog→cat} (a random
    token, 10%) and {cat→cat} (kept, 10%); each instance ends with its sentence-pair label: IsNext / NotNext
    (objective nsp), InOrder / Swapped (sop); objective none has no label.
    """
    from bertprep.bert_model.pretrain import remote_shards
    from bertprep.core import storage
    from bertprep.pipeline.shards import inspection

    local_dir, shard_path = shard_dir, None  # where the vocab lies; how a shard is had (None: in local_dir)
    try:
        if storage.is_remote(shard_dir):
            manifest, cache = remote_shards.open_cache(shard_dir)
            local_dir, shard_path = cache.folder, cache.fetch
        else:
            manifest = storage.read_manifest(shard_dir)
    except (FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from err
    if stats:
        click.echo(inspection.format_statistics(manifest))
    if manifest.get("output_format") == "mds":
        _inspect_mds(shard_dir, manifest, num_examples, skip, verify)
        return
    if num_examples:
        tokens = inspection.load_vocab_tokens(local_dir, manifest)
        rows = itertools.islice(inspection.iter_rows(local_dir, manifest, shard_path), skip, skip + num_examples)
        try:
            for k, row in enumerate(rows, start=skip):
                click.echo(f"\n#{k}: {inspection.decode_instance(row, tokens, inspection.objective_of(manifest))}")
        except ValueError as err:  # a damaged shard, named
            if not verify:
                raise click.ClickException(str(err)) from None
            click.echo(f"\n{err}", err=True)  # --verify below lists every damaged shard
    if verify:
        report = inspection.verify_shards(local_dir, manifest, shard_path)
        if report["errors"]:
            raise click.ClickException("verification failed:\n  " + "\n  ".join(report["errors"]))
        objective = inspection.objective_of(manifest)
        layout = (
            "holds exactly two [SEP] around non-empty segments, label share as in the manifest"
            if objective != "none"
            else "is full but the last of each bucket, document separators as counted"
        )
        if manifest.get("output_format") == "megatron":
            _verify_format_files(shard_dir, manifest)
        click.echo(
            f"\nverified: {report['rows']:,} rows in {report['shards']} shards match the manifest "
            f"(objective {objective}); every row <= max_seq_length, starts with [CLS], {layout}; token "
            "types and masked positions well formed"
        )


def _verify_format_files(shard_dir: str, manifest: dict) -> dict:
    """``--verify`` of an ``mds`` or ``megatron`` directory's files (``formats.verify_format_files``); a local
    directory only."""
    from bertprep.core import storage
    from bertprep.pipeline.shards import formats

    if storage.is_remote(shard_dir):
        raise click.ClickException(
            f"--verify of --output-format {manifest['output_format']} files reads a local directory: copy "
            f"{shard_dir} to a local folder and verify that"
        )
    report = formats.verify_format_files(shard_dir, manifest)
    if report["errors"]:
        raise click.ClickException("verification failed:\n  " + "\n  ".join(report["errors"]))
    click.echo(
        f"\nverified: the {report['files']} {manifest['output_format']} files match the manifest (sha256) and "
        f"{formats.LIBRARIES[manifest['output_format']][2]} reads {report['rows']:,} rows/sequences as recorded"
    )
    return report


def _inspect_mds(shard_dir: str, manifest: dict, num_examples: int, skip: int, verify: bool) -> None:
    """Instances of an MDS directory (read with ``StreamingDataset``), decoded; ``--verify``: its files."""
    from bertprep.core import storage
    from bertprep.pipeline.shards import formats, inspection

    if num_examples and not storage.is_remote(shard_dir):
        tokens = inspection.load_vocab_tokens(shard_dir, manifest)
        rows = itertools.islice(formats.iter_mds_rows(shard_dir, manifest), skip, skip + num_examples)
        for k, row in enumerate(rows, start=skip):
            click.echo(f"\n#{k}: {inspection.decode_instance(row, tokens, inspection.objective_of(manifest))}")
    if verify:
        _verify_format_files(shard_dir, manifest)
