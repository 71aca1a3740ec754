"""``bertprep build-vocab``: options -> :class:`VocabConfig` -> ``pipeline.text.vocab.build_vocab``."""

from __future__ import annotations

import logging
import sys

import click

from bertprep.cli.options import (
    casing_options,
    dataclass_default,
    field_option,
    inputs_option,
    output_dir_option,
    overwrite_option,
    quiet_option,
    reader_options,
)
from bertprep.pipeline.config import ReadOptions
from bertprep.pipeline.readers.segmentation import DEFAULT_SEGMENTER, SEGMENTERS
from bertprep.pipeline.text.vocab import MODELS, VocabConfig  # Beam-free (tokenizers only): cheap to import for --help
from bertprep.pipeline.text.vocab_models import SPECIAL_TOKEN_STYLES

#: Defaults shown in --help come from the dataclasses, never restated here.
_default = dataclass_default(VocabConfig, ReadOptions)


def _option(name: str, *decls: str, **attrs):
    """``field_option`` of ``VocabConfig``'s field ``name``: its default (shown) and its docstring as help."""
    return field_option(VocabConfig, name, *decls, **{"show_default": True, **attrs})


@click.command(
    "build-vocab",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("inputs", nargs=-1, metavar="[INPUTS]...")
@inputs_option("More inputs, as in make-shards: comma-separated globs, files or directories (repeatable).")
@output_dir_option(metavar="DIR")
@_option("model", type=click.Choice(MODELS))
@_option("vocab_size", type=int)
@casing_options(lower_case_default=_default("do_lower_case"), lower_case_names=("--lowercase/--cased",))
@_option("min_frequency", type=click.IntRange(min=0))
@_option("limit_alphabet", type=click.IntRange(min=0))
@_option("num_unused", type=click.IntRange(min=0))
@_option("special_tokens", type=click.Choice(SPECIAL_TOKEN_STYLES), show_default=False)
@_option("pad_to_multiple_of", type=click.IntRange(min=1), metavar="N")
@reader_options(segmenter_type=click.Choice(SEGMENTERS), segmenter_default=DEFAULT_SEGMENTER)
@overwrite_option()
@click.option(
    "--extend",
    "extend",
    metavar="VOCAB",
    help="Extend this vocab (vocab.txt, tokenizer.json or a directory with one) instead of training a new "
    "one: add the --extend-size pieces of INPUTS that save the most word pieces, first in its [unusedK] "
    "slots, then appended; every existing id stays. Keeps its casing; writes extension.json (piece, id, "
    "count) too. --vocab-size then sizes the corpus vocab the candidates come from (default: the base's).",
)
@click.option(
    "--extend-size",
    type=int,
    metavar="N",
    help="With --extend: the number of new pieces to add (at most; fewer when no other candidate saves a piece).",
)
@quiet_option()
@click.pass_context
def build_vocab(ctx, inputs, input_files, output_dir, overwrite, quiet, extend, extend_size, **options):
    """Train a WordPiece (BERT), byte-level BPE (RoBERTa, ModernBERT) or Unigram (XLM-R) vocabulary on INPUTS
    (files, globs or directories; local or gs://...).

    Without INPUTS it trains on the bundled demo corpus (three public-domain books), as make-shards does.

    Uses Hugging Face tokenizers (WordPiece: BertNormalizer + BertPreTokenizer + WordPieceTrainer) and reads
    the input once: memory grows with the number of distinct words, not with the corpus.

    \b
      bertprep build-vocab corpus/ -o vocab/ --vocab-size 30522
      bertprep build-vocab 'wiki/*/wiki_*' books/ -o vocab-cased/ --cased
      bertprep build-vocab corpus/ -o vocab-bpe/ --model bpe --vocab-size 50265
      bertprep build-vocab corpus/ -o vocab-mb/ --model bpe --special-tokens bert --vocab-size 50280 \\
          --pad-to-multiple-of 64
      bertprep build-vocab med/ --extend bert/vocab.txt --extend-size 500 -o vocab-med/

    WordPiece writes vocab.txt ([PAD] [UNK] [CLS] [SEP] [MASK] = ids 0-4, then [unused0]..., then the learned
    alphabet and word pieces; one token per line) and tokenizer.json with tokenizer_config.json and
    special_tokens_map.json, so that the directory loads with
    transformers.BertTokenizerFast.from_pretrained(DIR); bpe and unigram the last three (AutoTokenizer). Files
    are written only when training succeeded. --special-tokens bert gives a bpe or unigram vocab BERT's special
    tokens and [CLS] A [SEP] B [SEP] template (ModernBERT's layout), so that make-shards, train and other trainers
    read the same tokenizer.json; --pad-to-multiple-of 64 ends any vocab with [unusedK] entries up to a multiple
    of 64 (the example above: 50,280 + 24 = 50,304 = 786 x 64).

    Deterministic: the same input and options give byte-identical files in every run and process (the
    tokenizers trainer orders the ## characters in hash-map order; build-vocab fixes them first).
    """
    from bertprep.pipeline.readers import InputError
    from bertprep.pipeline.text.vocab import VocabSizeError
    from bertprep.pipeline.text.vocab import build_vocab as run_build_vocab

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    if extend is None and extend_size is not None:
        raise click.BadParameter("--extend-size needs --extend VOCAB (the vocab to extend)", param_hint="--extend-size")
    all_inputs = _input_paths(inputs, input_files)
    read_keys = ("input_format", "text_field", "segmenter", "encoding", "max_line_chars")
    read_options = {k: options.pop(k) for k in read_keys}
    if extend is not None:
        if options["model"] != "wordpiece":
            raise click.BadParameter("--extend keeps the base vocab's model; drop --model", param_hint="--model")
        options.pop("model")
        _extend(ctx, extend, extend_size, all_inputs, output_dir, overwrite, quiet, options, read_options)
        return
    config = _vocab_config(ctx, options, quiet)
    try:
        result = run_build_vocab(all_inputs, output_dir, config, **read_options, overwrite=overwrite)
    except VocabSizeError as err:
        raise click.BadParameter(str(err), param_hint="--vocab-size") from err
    except (InputError, ValueError, OSError) as err:
        raise click.ClickException(str(err)) from err
    click.echo(result.trained.summary())
    warning = result.trained.accent_warning(cased_flag="--cased")
    if warning:
        click.echo(f"Warning: {warning}", err=True)
    stats = result.reader_stats
    click.echo(f"input: {stats.files:,} files, {stats.documents:,} documents, {stats.bytes / 1e6:,.1f} MB")
    click.echo(f"wrote: {', '.join(result.written.values())}")


def _extend(ctx, extend, extend_size, all_inputs, output_dir, overwrite, quiet, options, read_options) -> None:
    """``--extend VOCAB --extend-size N``: ``pipeline.text.vocab_extension.extend_vocab_files``."""
    from click.core import ParameterSource

    from bertprep.core.vocab_files import VocabError
    from bertprep.pipeline.readers import InputError
    from bertprep.pipeline.text.vocab_extension import extend_vocab_files

    if extend_size is None:
        raise click.BadParameter("give the number of pieces to add: --extend-size N", param_hint="--extend-size")
    if extend_size <= 0:
        raise click.BadParameter(f"must be at least 1 (pieces to add), got {extend_size}", param_hint="--extend-size")

    def given(name: str):
        """The option's value when the user gave it, else None (the base vocab decides)."""
        return options[name] if ctx.get_parameter_source(name) != ParameterSource.DEFAULT else None

    if given("num_unused") is not None:
        raise click.BadParameter(
            "an extension keeps the base vocab's [unusedK] slots (and fills them); drop it", param_hint="--num-unused"
        )
    for name in ("special_tokens", "pad_to_multiple_of"):
        if given(name) is not None:
            raise click.BadParameter(
                "an extension keeps the base vocab's special tokens and size layout; drop it",
                param_hint="--" + name.replace("_", "-"),
            )
    try:
        result = extend_vocab_files(
            all_inputs,
            output_dir,
            extend,
            extend_size,
            do_lower_case=given("do_lower_case"),
            strip_accents=options["strip_accents"],
            train_vocab_size=given("vocab_size"),
            min_frequency=options["min_frequency"],
            limit_alphabet=options["limit_alphabet"] or None,
            show_progress=not quiet,
            overwrite=overwrite,
            **read_options,
        )
    except VocabError as err:
        raise click.BadParameter(str(err), param_hint=err.option or "--extend") from err
    except FileNotFoundError as err:
        raise click.BadParameter(str(err), param_hint="--extend") from err
    except (InputError, ValueError, OSError) as err:
        raise click.ClickException(str(err)) from err
    click.echo(result.extended.summary())
    stats = result.reader_stats
    click.echo(f"input: {stats.files:,} files, {stats.documents:,} documents, {stats.bytes / 1e6:,.1f} MB")
    click.echo(f"wrote: {', '.join(result.written.values())}")


def _input_paths(inputs: tuple[str, ...], input_files: tuple[str, ...]) -> list[str]:
    """INPUTS and -i/--input values, split at commas; the bundled demo corpus when there are none."""
    all_inputs = [p for value in (*inputs, *input_files) for p in value.split(",") if p.strip()]
    if not all_inputs:
        from bertprep.pipeline import demo_corpus_dir

        all_inputs = [demo_corpus_dir()]
        click.echo(f"No INPUTS given: using the bundled demo corpus {all_inputs[0]}", err=True)
    return all_inputs


#: Options of BERT's WordPiece that ``--model bpe|unigram`` do not have (and unigram's trainer has no
#: ``--min-frequency``).
_WORDPIECE_ONLY = ("strip_accents", "num_unused", "limit_alphabet")


def _vocab_config(ctx, options: dict, quiet: bool) -> VocabConfig:
    """The ``VocabConfig`` of the vocab options (``--limit-alphabet 0``: no limit); bad values are
    ``click.BadParameter``. Under ``--model bpe|unigram`` a WordPiece-only option given is refused, the others
    take the model's values (cased unless ``--lowercase`` is given, no ``[unusedN]`` slots)."""
    from click.core import ParameterSource

    from bertprep.pipeline.text.vocab import VocabSizeError

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)

    model = options["model"]
    if model == "wordpiece" and options["special_tokens"] == "roberta":
        raise click.BadParameter(
            "a wordpiece vocab has BERT's special tokens ([CLS] [SEP]...); roberta's are for --model bpe or unigram",
            param_hint="--special-tokens",
        )
    if model != "wordpiece":
        refused = [n for n in _WORDPIECE_ONLY + (("min_frequency",) if model == "unigram" else ()) if given(n)]
        if refused:
            flag = "--" + refused[0].replace("_", "-")
            raise click.BadParameter(f"not used with --model {model} (a WordPiece setting); drop it", param_hint=flag)
        options = {**options, "strip_accents": None, "num_unused": 0, "limit_alphabet": None}
        if not given("do_lower_case"):
            options["do_lower_case"] = False  # RoBERTa, ModernBERT and XLM-R are cased
    try:
        return VocabConfig(**{**options, "limit_alphabet": options["limit_alphabet"] or None}, show_progress=not quiet)
    except VocabSizeError as err:
        raise click.BadParameter(str(err), param_hint="--vocab-size") from err
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
