"""``bertprep build-vocab``: options -> :class:`VocabConfig` -> :func:`train_wordpiece` -> :func:`save_vocab`."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator

import click

from bertprep.pipeline.readers import INPUT_FORMATS
from bertprep.pipeline.text.segmentation import DEFAULT_SEGMENTER, SEGMENTERS
from bertprep.pipeline.text.vocab import VocabConfig  # Beam-free (tokenizers only): cheap to import for --help

#: Defaults shown in --help come from the dataclass, never restated here.
_VOCAB = VocabConfig.__dataclass_fields__


def _default(name: str):
    """Default of a ``VocabConfig`` field."""
    return _VOCAB[name].default


#: Seconds between two progress lines while reading.
_PROGRESS_INTERVAL_S = 5.0


def _texts_with_progress(files: list[str], read_options: dict, stats, show: bool) -> Iterator[str]:
    """Every sentence of ``files`` (through the readers), reporting progress over files and bytes on stderr.

    The trainer's own bar (indicatif, in Rust) redraws the current terminal line while it consumes this
    iterator, so a second live bar would fight it for the line. Progress is therefore printed as whole
    lines (tqdm's meter format) above the trainer's bar: at most one every ``_PROGRESS_INTERVAL_S``
    seconds, and one when the last file is done.
    """
    from tqdm import tqdm

    from bertprep.pipeline.readers import read_documents

    start = last = time.monotonic()
    clear = "\r\x1b[2K" if sys.stderr.isatty() else ""

    def report(done: int) -> None:
        line = tqdm.format_meter(
            done,
            len(files),
            time.monotonic() - start,
            prefix="Reading",
            unit="file",
            postfix=f"{stats.bytes / 1e6:,.1f} MB, {stats.sentences:,} sentences",
        )
        sys.stderr.write(f"{clear}{line}\n")
        sys.stderr.flush()

    for done, path in enumerate(files):
        for document in read_documents(path, stats=stats, **read_options):
            yield from document.sentences
            if show and time.monotonic() - last >= _PROGRESS_INTERVAL_S:
                report(done)
                last = time.monotonic()
    if show:
        report(len(files))


@click.command(
    "build-vocab",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("inputs", nargs=-1, metavar="INPUTS...")
@click.option(
    "-i",
    "--input-file",
    "input_files",
    multiple=True,
    metavar="GLOBS",
    help="More inputs, as in make-shards: comma-separated globs, files or directories (repeatable).",
)
@click.option(
    "-o",
    "--output-dir",
    required=True,
    metavar="DIR",
    help="Local directory for vocab.txt, tokenizer.json, tokenizer_config.json and "
    "special_tokens_map.json (created if needed).",
)
@click.option(
    "--vocab-size",
    type=int,
    default=_default("vocab_size"),
    show_default=True,
    help="Entries in the vocab, counting the 5 special tokens, the [unusedN] slots, the alphabet and "
    "the learned word pieces (bert-base-uncased: 30522). Fewer only if the corpus runs out of "
    "pairs occurring --min-frequency times.",
)
@click.option(
    "--lowercase/--cased",
    "--do-lower-case/--no-do-lower-case",
    "do_lower_case",
    default=_default("do_lower_case"),
    show_default=True,
    help="Uncased (lower-case and strip accents, the original do_lower_case) or cased vocab. "
    "make-shards must then use the same setting.",
)
@click.option(
    "--strip-accents/--no-strip-accents",
    default=None,
    help="Strip accents (Unicode NFD, combining marks dropped) apart from lower-casing. Default: the "
    "same as --lowercase/--cased (the original). Stripping splits every Hangul syllable into "
    "jamo and drops marks other scripts need (Vietnamese tones, Devanagari vowel signs); for "
    "Korean and such scripts pass --no-strip-accents (or --cased). A warning with the share of "
    "letters affected is printed when it matters. Recorded in tokenizer.json and "
    "tokenizer_config.json.",
)
@click.option(
    "--min-frequency",
    type=click.IntRange(min=0),
    default=_default("min_frequency"),
    show_default=True,
    help="Merge a pair of pieces only if it occurs at least this often.",
)
@click.option(
    "--limit-alphabet",
    type=click.IntRange(min=0),
    default=_default("limit_alphabet"),
    show_default=True,
    help="Keep at most this many distinct characters (the most frequent); words with a dropped "
    "character become [UNK]. 0 = keep every character (raise it for CJK-heavy text).",
)
@click.option(
    "--num-unused",
    type=click.IntRange(min=0),
    default=_default("num_unused"),
    show_default=True,
    help="[unused0].. slots after the special tokens, as in Google's vocab: entries you can repurpose "
    "for new tokens when fine-tuning, without resizing the embedding matrix.",
)
@click.option(
    "--input-format",
    type=click.Choice(INPUT_FORMATS),
    default="auto",
    show_default=True,
    help="bert: one sentence per line, blank line between documents; jsonl: one JSON document per "
    "line (--text-field); text: one prose document per file (books); wikiextractor / "
    "wikiextractor-json: WikiExtractor output; wiki-xml: pages-articles XML dumps (.xml, "
    ".xml.bz2); parquet (--text-field). auto: detected per file. As in make-shards.",
)
@click.option(
    "--text-field", default="text", show_default=True, help="Field holding the document text in jsonl/parquet input."
)
@click.option(
    "--segmenter",
    type=click.Choice(SEGMENTERS),
    default=DEFAULT_SEGMENTER,
    show_default=True,
    help="Sentence segmenter for prose formats. Sentence boundaries do not change the vocab (no word "
    "spans one): blingfire, if installed, gives the same tokens about 2x faster end to end.",
)
@click.option(
    "--encoding",
    default="utf-8",
    show_default=True,
    help="Text encoding of the inputs; undecodable bytes are replaced (and dropped by the tokenizer).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace vocab.txt / tokenizer.json already in --output-dir (otherwise refused); the old files "
    "stay until the new vocab is trained and written.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bars; only the summary, warnings and errors.")
def build_vocab(
    inputs,
    input_files,
    output_dir,
    vocab_size,
    do_lower_case,
    strip_accents,
    min_frequency,
    limit_alphabet,
    num_unused,
    input_format,
    text_field,
    segmenter,
    encoding,
    overwrite,
    quiet,
):
    """Train a WordPiece vocabulary on INPUTS (files, globs or directories; local or gs://...).

    Without INPUTS it trains on the bundled demo corpus (three public-domain books), as make-shards does.

    Uses Hugging Face tokenizers (BertNormalizer + BertPreTokenizer + WordPieceTrainer) and streams the
    input once: memory grows with the number of distinct words, not with the corpus.

    \b
      bertprep build-vocab corpus/ -o vocab/ --vocab-size 30522
      bertprep build-vocab 'wiki/*/wiki_*' books/ -o vocab-cased/ --cased

    Writes vocab.txt ([PAD] [UNK] [CLS] [SEP] [MASK] = ids 0-4, then [unused0]..., then the learned
    alphabet and word pieces; one token per line) and tokenizer.json with tokenizer_config.json and
    special_tokens_map.json, so that the directory loads with
    transformers.BertTokenizerFast.from_pretrained(DIR). Files are written only when training succeeded.

    NOT DETERMINISTIC: the tokenizers trainer breaks ties between equally frequent pairs, and orders the
    ## characters, in hash-map order, so two runs on the same input give vocabs whose ids differ (on 16 MB
    of English text about a quarter of the ids moved) and, where pairs tie at the cut-off, a few entries.
    Keep the vocab.txt you made shards with; do not expect to re-create it byte for byte.
    """
    from bertprep.pipeline.readers import InputError, ReaderStats, check_options, expand_inputs
    from bertprep.pipeline.text.vocab import (
        VocabConfig,
        VocabSizeError,
        check_output_dir,
        existing_outputs,
        save_vocab,
        train_wordpiece,
    )

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    all_inputs = [p for value in (*inputs, *input_files) for p in value.split(",") if p.strip()]
    if not all_inputs:
        from bertprep.pipeline import demo_corpus_dir

        all_inputs = [demo_corpus_dir()]
        click.echo(f"No INPUTS given: using the bundled demo corpus {all_inputs[0]}", err=True)
    try:
        config = VocabConfig(
            vocab_size=vocab_size,
            do_lower_case=do_lower_case,
            strip_accents=strip_accents,
            min_frequency=min_frequency,
            limit_alphabet=limit_alphabet or None,
            num_unused=num_unused,
            show_progress=not quiet,
        )
    except VocabSizeError as err:
        raise click.BadParameter(str(err), param_hint="--vocab-size") from err
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
    found = existing_outputs(output_dir)
    if found and not overwrite:
        raise click.ClickException(f"{', '.join(found)} already exist(s); pass --overwrite to replace")

    read_options = dict(input_format=input_format, text_field=text_field, segmenter=segmenter, encoding=encoding)
    try:
        check_options(input_format, segmenter=segmenter, encoding=encoding)
        files = expand_inputs(all_inputs)
    except InputError as err:
        raise click.ClickException(str(err)) from err
    try:
        check_output_dir(output_dir, files)
    except ValueError as err:
        raise click.ClickException(str(err)) from err

    stats = ReaderStats()
    try:
        trained = train_wordpiece(_texts_with_progress(files, read_options, stats, not quiet), config)
    except VocabSizeError as err:
        raise click.BadParameter(str(err), param_hint="--vocab-size") from err
    except (InputError, ValueError) as err:
        raise click.ClickException(str(err)) from err
    try:
        written = save_vocab(trained, output_dir, overwrite=overwrite)
    except (OSError, FileExistsError) as err:
        raise click.ClickException(str(err)) from err

    click.echo(trained.summary())
    warning = trained.accent_warning(cased_flag="--cased")
    if warning:
        click.echo(f"Warning: {warning}", err=True)
    click.echo(f"input: {stats.files:,} files, {stats.documents:,} documents, {stats.bytes / 1e6:,.1f} MB")
    click.echo(f"wrote: {', '.join(written.values())}")
