"""``bertprep plot RUN [RUN...] -o curves.png``: learning curves of pre-training runs in one picture."""

from __future__ import annotations

import os

import click

from bertprep.cli.options import output_file_option


@click.command("plot", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True))
@output_file_option(
    "The image to write: .png, .svg or .pdf (replaced whole, or left as it was on an error).",
    "output",
    default="curves.png",
    show_default=True,
)
@click.option("--title", default=None, help="A title above the curves.")
def plot(runs: tuple[str, ...], output: str, title: str | None) -> None:
    """Draw the learning curves of one or more pre-training runs in one picture: held-out MLM accuracy at
    [MASK] and loss (training line, held-out dots), against the tokens trained on and against minutes, one
    colour per run. RUN is a directory written by 'bertprep train' (or its metrics.jsonl); a run's own
    metrics.png shows all of its figures against steps.

    \b
    Example:
      bertprep plot runs/bert-mini runs/modernbert-mini -o curves.png
    """
    from bertprep.bert_model.curves import plot_runs, read_run, run_names

    try:
        curves = [read_run(run, name) for run, name in zip(runs, run_names(list(runs)), strict=True)]
    except (OSError, ValueError) as err:
        raise click.BadParameter(str(err), param_hint="RUN") from None
    for run, curve in zip(runs, curves, strict=True):
        if len(curve.eval_loss) == 0:
            click.echo(f"{run}: no held-out evaluations (train with --eval-shards); only its training loss is drawn")
    folder = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(folder):
        raise click.BadParameter(f"{output}: no folder {folder} to write it in; create it first", param_hint="--output")
    try:
        plot_runs(curves, output, title=title)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--output") from None
    except OSError as err:
        raise click.ClickException(f"cannot write {output} ({err.strerror or err})") from None
    click.echo(f"wrote {output} ({len(curves)} run{'s' if len(curves) > 1 else ''})")
