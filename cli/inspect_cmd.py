"""``bertprep inspect DIR``: statistics of a shard directory and decoded instances."""

from __future__ import annotations

import itertools

import click

from bertprep.cli.options import verify_option


@click.command("inspect", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("shard_dir", type=click.Path(exists=True, file_okay=False))
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

    Masked positions are shown as {shown→label}: {[MASK]→cat} (80% of predictions), {dog→cat} (a random
    token, 10%) and {cat→cat} (kept, 10%); each instance ends with its sentence-pair label: IsNext / NotNext
    (objective nsp), InOrder / Swapped (sop); objective none has no label.
    """
    from bertprep.pipeline import schema
    from bertprep.pipeline.shards import inspection

    try:
        manifest = schema.read_manifest(shard_dir)
    except (FileNotFoundError, ValueError) as err:
        raise click.ClickException(str(err)) from err
    if stats:
        click.echo(inspection.format_statistics(manifest))
    if num_examples:
        tokens = inspection.load_vocab_tokens(shard_dir)
        rows = itertools.islice(inspection.iter_rows(shard_dir, manifest), skip, skip + num_examples)
        try:
            for k, row in enumerate(rows, start=skip):
                click.echo(f"\n#{k}: {inspection.decode_instance(row, tokens, inspection.objective_of(manifest))}")
        except ValueError as err:  # a damaged shard, named
            if not verify:
                raise click.ClickException(str(err)) from None
            click.echo(f"\n{err}", err=True)  # --verify below lists every damaged shard
    if verify:
        report = inspection.verify_shards(shard_dir, manifest)
        if report["errors"]:
            raise click.ClickException("verification failed:\n  " + "\n  ".join(report["errors"]))
        objective = inspection.objective_of(manifest)
        layout = (
            "holds exactly two [SEP] around non-empty segments, label share as in the manifest"
            if objective != "none"
            else "is full but the last of each bucket, document separators as counted"
        )
        click.echo(
            f"\nverified: {report['rows']:,} rows in {report['shards']} shards match the manifest "
            f"(objective {objective}); every row <= max_seq_length, starts with [CLS], {layout}; token "
            "types and masked positions well formed"
        )
