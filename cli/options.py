"""Option types the commands share, the option vocabulary every command uses, and where defaults come from.

The same idea has the same name in every command (``--help`` and the CLI reference show only these):

- ``-i, --input``: what the command reads (files, globs or directories);
- ``-o, --output-dir``: the directory it writes, or ``-o, --output`` where it writes one file;
- ``-m, --model``: a model it reads (a bertprep checkpoint or run directory, a Hugging Face directory, or a
  Hugging Face Hub id such as ``answerdotai/ModernBERT-base``: :class:`ModelPath`).

Earlier spellings (``--input-file``, ``--init-from``, ...) still parse as hidden aliases
(:class:`AliasedOption`); docs/cli.md lists them. An option's default is its library dataclass field's, read by
:func:`dataclass_default`, never restated in ``cli/``. The parameter types themselves are ``param_types.py``'s.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import itertools
import math
import re
import textwrap
from collections.abc import Callable
from typing import Any

import click

from bertprep.cli.param_types import AliasedOption, FiniteFloat, LocalPath, ModelPath, finite_float_type


def _check_report_to(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from bertprep.bert_model.reporting import report_to_unavailable

    problem = report_to_unavailable(value)
    if problem:
        raise click.BadParameter(problem.removeprefix("--report-to "), ctx=ctx, param=param)
    return value


def report_to_option(command):
    """``--report-to none|tensorboard|wandb`` (``bertprep.bert_model.reporting``), shared by train and finetune;
    a reporter whose package is missing is refused before any work starts."""
    from bertprep.bert_model.reporting import REPORT_TO

    return click.option(
        "--report-to",
        type=click.Choice(REPORT_TO),
        default="none",
        callback=_check_report_to,
        help="Also log every metrics.jsonl figure to TensorBoard (event files in OUTPUT/tensorboard/; "
        "pip install 'bertprep[tensorboard]') or Weights & Biases (a run named after OUTPUT; WANDB_MODE=offline "
        "keeps it in OUTPUT/wandb/; pip install 'bertprep[wandb]'), as train/<field> and eval/<field> at each step.",
    )(command)


def resume_changes_option(command):
    """``--allow-resume-changes`` (train): with ``--resume``, train with the run settings given even where they
    differ from the checkpoint's (``TrainConfig.allow_resume_changes``)."""
    return click.option(
        "--allow-resume-changes",
        is_flag=True,
        default=False,
        help="With --resume: use the optimizer, schedule, batch, seed or masking options given even where they "
        "differ from the checkpoint's (e.g. a longer --max-steps); the run then differs from an uninterrupted "
        "one. Without it such a difference is refused.",
    )(command)


def dataclass_default(*classes: type) -> Callable[[str], Any]:
    """``default(name)``: the default of field ``name`` of the first of ``classes`` (library dataclasses) that
    declares it, for an option's ``default=`` and its ``--help``.

    Raises:
        KeyError: (when the command is defined, so every test of it fails) no class declares ``name`` with a
            plain default (a required field, or one with a ``default_factory``).
    """
    fields = {}
    for cls in reversed(classes):
        fields.update({f.name: f for f in dataclasses.fields(cls)})

    def default(name: str) -> Any:
        field = fields[name]
        if field.default is dataclasses.MISSING:
            raise KeyError(f"{name} has no plain default in {', '.join(c.__name__ for c in classes)}")
        return field.default

    return default


@functools.cache
def _field_docstrings(cls: type) -> dict[str, str]:
    """Field name -> the string literal right under its annotation in ``cls``'s own body (not its bases')."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):  # no source (a class made at run time): no docstrings
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = following.value.value
    return docs


def field_help(cls: type, name: str) -> str | None:
    """The docstring of dataclass field ``name`` (the string literal under it, as PEP 257 "attribute docstrings"
    and Sphinx autodoc read them) as one line of ``--help`` text, from the first class in ``cls``'s MRO whose
    body declares it; None when it has none.

    Python keeps no such docstring at run time, so it is read from the class's source (``inspect.getsource`` +
    ``ast``). ReST markup becomes plain text: ````x```` -> ``x``, ``:class:`X``` -> ``X``; lines are joined.
    """
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}):
            doc = _field_docstrings(klass).get(name)
            if doc is None:
                return None
            text = " ".join(inspect.cleandoc(doc).split())
            return _ROLE.sub(r"\1", text).replace("``", "")
    return None


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def field_option(config: type, name: str, *decls: str, **attrs: Any) -> Callable:
    """``click.option(*decls, **attrs)`` for field ``name`` of the dataclass ``config``: its ``default`` is the
    field's (:func:`dataclass_default`, when the field has a plain one and ``attrs`` give none), its ``help`` the
    field's docstring (:func:`field_help`) unless ``attrs`` give one. ``decls`` default to ``--<name>``."""
    decls = decls or ("--" + name.replace("_", "-"),)
    if "default" not in attrs:
        field = {f.name: f for f in dataclasses.fields(config)}[name]
        attrs["default"] = None if field.default is dataclasses.MISSING else field.default
    attrs.setdefault("help", field_help(config, name))
    if "type" in attrs:
        attrs["type"] = finite_float_type(attrs["type"])
    return click.option(*decls, **attrs)


def apply(*decorators: Callable) -> Callable:
    """One decorator applying ``decorators`` as if stacked in this order above a command (the first on top)."""

    def decorate(command):
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return decorate


# Option groups that several commands share, each declared once: a function returning one decorator, applied
# with one line above the command. Help comes from the shared dataclass field's docstring where there is one
# (``field_option``), else from the one text here; each option name has one help text in every command
# (tests/cli/test_option_help.py).

_LOWER_CASE_HELP = (
    "Lower-case the text and, unless --no-strip-accents, strip accents (an uncased vocab: the original "
    "do_lower_case); it must match the vocab. Default: as recorded with the vocab or model (tokenizer.json, the "
    "model's files), else guessed from the vocab (make-shards: on, the original's default; a mismatch with the "
    "vocab is warned about). build-vocab builds an uncased or cased vocab and records it; with --model bpe or "
    "unigram it is cased unless lower-casing is asked for, which then keeps accents."
)
_STRIP_ACCENTS_HELP = (
    "Strip accents (Unicode NFD, combining marks dropped) apart from lower-casing; it must match the vocab. "
    "Default: as recorded with the vocab or model, else the same as the lower-casing (the original). Stripping "
    "splits every Hangul syllable into jamo and drops marks other scripts need (Vietnamese tones, Devanagari "
    "vowel signs): for Korean and such scripts pass --no-strip-accents. build-vocab records it in tokenizer.json "
    "and tokenizer_config.json (warning with the share of letters affected when it matters); make-shards refuses "
    "a tokenizer.json built with the other setting and warns about a vocab.txt whose Korean entries say otherwise."
)


def casing_options(*, strip_accents: bool = True, lower_case_default: bool | None = None, lower_case_names=()):
    """``--do-lower-case/--no-do-lower-case`` (parameter ``do_lower_case``; ``lower_case_names`` add spellings,
    build-vocab's ``--lowercase/--cased``) and, with ``strip_accents``, ``--strip-accents/--no-strip-accents``:
    the tokenizer's normalisation, None = as recorded with the vocab or model."""
    options = [
        click.option(
            *lower_case_names,
            "--do-lower-case/--no-do-lower-case",
            "do_lower_case",
            default=lower_case_default,
            show_default=lower_case_default is not None,
            help=_LOWER_CASE_HELP,
        )
    ]
    if strip_accents:
        options.append(click.option("--strip-accents/--no-strip-accents", default=None, help=_STRIP_ACCENTS_HELP))
    return apply(*options)


def device_option(config: type):
    """``--device`` of every command that runs a model (``loop_config.DeviceConfig``)."""
    from bertprep.bert_model.loop_config import DeviceConfig

    return field_option(config, "device", help=field_help(DeviceConfig, "device"))


def progress_option(config: type | None = None):
    """``--progress/--no-progress``: the default is ``config``'s ``progress`` field (else on)."""
    default = dataclass_default(config)("progress") if config is not None else True
    return click.option("--progress/--no-progress", default=default, help="Show a progress bar.")


def loop_options(config: type):
    """What a training loop takes besides data and optimizer (``loop_config.LoopConfig``: train, finetune):
    ``--seed``, ``--log-every``, ``--precision``, ``--device``, ``--report-to``, ``--progress``."""
    from bertprep.bert_model.loop_config import PRECISIONS, LoopConfig

    def shared(name: str, *decls: str, **attrs: Any):
        return field_option(config, name, *decls, help=field_help(LoopConfig, name), **attrs)

    return apply(
        shared("seed", type=int),
        shared("log_every", type=click.IntRange(min=1)),
        shared("precision", type=click.Choice(PRECISIONS), show_default=True),
        device_option(config),
        report_to_option,
        progress_option(config),
    )


def optimizer_options(config: type):
    """AdamW's settings (``loop_config.OptimConfig``; the learning rate is each command's field, the help one):
    ``--learning-rate/--lr``, ``--weight-decay``, ``--adam-beta1``, ``--adam-beta2``, ``--adam-epsilon``,
    ``--max-grad-norm``."""
    from bertprep.bert_model.loop_config import OptimConfig

    def shared(name: str, type_: click.ParamType):
        return field_option(config, name, type=type_, help=field_help(OptimConfig, name))

    return apply(
        field_option(
            config,
            "learning_rate",
            "--learning-rate",
            "--lr",
            type=click.FloatRange(min=0, min_open=True),
            help="Peak AdamW learning rate, reached after the warm-up (paper: 1e-4 for pre-training; 5e-5, 3e-5 "
            "or 2e-5 for fine-tuning).",
        ),
        shared("weight_decay", click.FloatRange(min=0)),
        shared("adam_beta1", click.FloatRange(0, 1, max_open=True)),
        shared("adam_beta2", click.FloatRange(0, 1, max_open=True)),
        shared("adam_epsilon", click.FloatRange(min=0, min_open=True)),
        shared("max_grad_norm", click.FloatRange(min=0)),
    )


def stop_options(config: type, phases: bool = False):
    """When a training run stops and evaluates (train, finetune): ``--max-steps``, ``--max-time-minutes``,
    ``--eval-every``. ``phases``: the command takes ``--phase`` (train), and ``--max-steps`` 0 or left out
    means the phases' sum."""
    # (one help text for both commands, so that the name means one thing everywhere)
    by_phases = (
        " train with --phase: left out (or 0) where every phase gives steps= or tokens=, the sum of the phases' "
        "steps; given, it must equal that sum."
    )
    return apply(
        field_option(
            config,
            "max_steps",
            type=click.IntRange(min=0 if phases else 1),
            help="Optimizer steps of the learning-rate schedule; training stops there (train, paper: 1,000,000; "
            "finetune: overrides --num-train-epochs)." + by_phases,
        ),
        field_option(
            config,
            "max_time_minutes",
            type=click.FloatRange(min=0, min_open=True),
            help="Stop cleanly after this many minutes, the schedule unchanged (train: with a checkpoint to "
            "continue from with --resume; finetune: then evaluate and save).",
        ),
        field_option(
            config,
            "eval_every",
            type=click.IntRange(min=0),
            help="Optimizer steps between evaluations (train: on --eval-shards, 0 = only at the end; finetune: on "
            "--eval-file besides the one after each epoch, 0 = after each epoch only).",
        ),
    )


def column_options():
    """The columns of a GLUE-style TSV (finetune sets them, predict overrides those recorded with the model):
    ``--text-a-column``, ``--text-b-column``, ``--label-column``, ``--header/--no-header``."""
    return apply(
        click.option(
            "--text-a-column",
            default=None,
            help="Column of the (first) sentence: a header name or a 0-based index (predict: default the model's).",
        ),
        click.option("--text-b-column", default=None, help="Column of the second sentence of a pair."),
        click.option(
            "--label-column",
            default=None,
            help="Column of the label, optional in predict's input (multiple-choice: the right ending's 0-based "
            "index; default 'label').",
        ),
        click.option("--header/--no-header", default=None, help="Whether the TSV's first line names the columns."),
    )


def squad_options():
    """SQuAD's windows and answers (finetune sets them, predict overrides those recorded with the model):
    ``--doc-stride``, ``--max-answer-length``, ``--squad-version``, ``--null-score-diff-threshold``."""
    return apply(
        click.option(
            "--doc-stride",
            type=click.IntRange(min=1),
            default=None,
            help="squad: pieces between the starts of context windows (default 128, predict: the model's).",
        ),
        click.option(
            "--max-answer-length",
            type=click.IntRange(min=1),
            default=None,
            help="squad: longest predicted answer in pieces (default 30, predict: the model's).",
        ),
        click.option(
            "--squad-version",
            "version",
            type=click.Choice(["1.1", "2.0"]),
            default=None,
            help="squad: 2.0 = questions may have no answer (is_impossible; null span at [CLS]). Default: the "
            "training file's 'version' field (predict: the model's).",
        ),
        click.option(
            "--null-score-diff-threshold",
            type=FiniteFloat(),
            default=None,
            help="squad v2.0: predict no answer when s_null - s_best_span > this (tau). Default: chosen on the "
            "eval file as the official best_f1_thresh and saved with the model (0.0 without an eval file); "
            "predict writes the null odds beside --output as NAME.null_odds.json.",
        ),
    )


def reader_options(*, segmenter_type: click.ParamType | None = None, segmenter_default: str | None = None):
    """How the input files are read (``pipeline.config.ReadOptions``: build-vocab, make-shards):
    ``--input-format``, ``--text-field`` (also ``--text-column``), ``--segmenter``, ``--encoding``,
    ``--max-line-chars``."""
    from bertprep.pipeline.config import ReadOptions
    from bertprep.pipeline.readers import INPUT_FORMATS

    return apply(
        field_option(
            ReadOptions,
            "input_format",
            type=click.Choice(INPUT_FORMATS),
            show_default=True,
            help="bert: one sentence per line, blank line between documents (the original's format); jsonl: one "
            "JSON document per line (--text-field); text: one prose document per file (books; Project Gutenberg "
            "header/footer stripped); wikiextractor / wikiextractor-json: WikiExtractor output; wiki-xml: "
            "pages-articles XML dumps (.xml, .xml.bz2); parquet (--text-field); hf: a Hugging Face datasets "
            "save_to_disk directory or Hub dataset files (.arrow/.parquet, --text-field); csv / tsv: a header row, one "
            "document per row, the text in the column --text-column (quoted line breaks kept; a file is read by "
            "one worker). auto: detected per file from extension and content.",
        ),
        field_option(ReadOptions, "text_field", "--text-field", "--text-column", show_default=True),
        click.option(
            "--segmenter",
            type=segmenter_type,
            default=segmenter_default,
            show_default=segmenter_default is not None,
            help="Sentence segmenter for prose formats: syntok, or blingfire (pip install 'bertprep[fast]'), "
            "which gives the same vocab about 2x faster (no word spans a sentence boundary).",
        ),
        field_option(ReadOptions, "encoding", show_default=True),
        field_option(ReadOptions, "max_line_chars", type=click.IntRange(min=1), show_default=True),
    )


def quiet_option():
    """``-q, --quiet`` of the commands that log their progress (build-vocab, make-shards)."""
    return click.option(
        "-q",
        "--quiet",
        is_flag=True,
        help="Only the summary, warnings and errors: no progress bars, and make-shards' local worker processes "
        "log only warnings and errors (their tracebacks included).",
    )


def output_dir_option(**attrs: Any):
    """``-o, --output-dir`` (required): the directory a command writes; ``attrs`` add its type or metavar."""
    return click.option(
        "-o",
        "--output-dir",
        required=True,
        help="The directory to write, created if needed. build-vocab: vocab.txt, tokenizer.json, "
        "tokenizer_config.json and special_tokens_map.json (a local directory); make-shards: the shards and "
        "manifest.json (local or gs://...); train: metrics.jsonl, metrics.png and checkpoints/; finetune: best/ "
        "(Hugging Face model + finetune.json), metrics.jsonl, results.json, eval_predictions.*; export: "
        "config.json, model.safetensors, vocab.txt and the tokenizer files.",
        **attrs,
    )


def overwrite_option():
    """``--overwrite``: replace what an earlier run wrote instead of refusing to."""
    return click.option(
        "--overwrite",
        is_flag=True,
        default=False,
        help="Replace an existing output (--output-dir or --output) instead of refusing to. build-vocab, "
        "make-shards and finetune keep the old one until the new one is complete: a failed or killed run leaves "
        "it as it was.",
    )


def model_option(param: str, help: str, **attrs: Any):
    """``-m, --model`` (parameter ``param``): the model a command reads, a directory or a Hub id
    (:class:`ModelPath`; ``attrs`` add ``required`` or another type). ``init_from`` (train, finetune) also
    parses its earlier spelling ``--init-from``."""
    if param == "init_from":
        attrs = {"cls": AliasedOption, "aliases": ("--init-from",), **attrs}
    attrs.setdefault("type", ModelPath())
    return click.option("-m", "--model", param, help=help, **attrs)


def inputs_option(help: str):
    """``-i, --input`` (parameter ``input_files``, repeatable; earlier spelling ``--input-file``): the globs,
    files or directories a corpus command reads (build-vocab, make-shards)."""
    return click.option(
        "-i",
        "--input",
        "input_files",
        cls=AliasedOption,
        aliases=("--input-file",),
        multiple=True,
        metavar="GLOBS",
        help=help,
    )


def input_file_option(help: str, **attrs: Any):
    """``-i, --input`` (parameter ``input_file``) of a command that reads one existing file (fill-mask, predict,
    extract-features); ``attrs`` add ``required`` or a default."""
    return click.option("-i", "--input", "input_file", type=click.Path(exists=True, dir_okay=False), help=help, **attrs)


def output_file_option(help: str, name: str = "output_file", **attrs: Any):
    """``-o, --output`` (parameter ``name``) of a command that writes one file (predict, extract-features, plot,
    evaluate table); ``attrs`` add ``required`` or a default."""
    return click.option("-o", "--output", name, type=click.Path(dir_okay=False), help=help, **attrs)


def model_vocab_option():
    """``--vocab`` of the commands that read a trained model (finetune, export): a ``vocab.txt`` instead of the
    one saved with the model."""
    return click.option(
        "--vocab",
        type=LocalPath(exists=True, dir_okay=False),
        default=None,
        help="vocab.txt of the model (default: the one saved with it): finetune tokenizes with it, export writes it.",
    )


def preset_option(choices, default: str | None):
    """``--preset``: a model size by name (train: of its architecture; finetune: a randomly initialised BERT)."""
    return click.option(
        "--preset",
        type=click.Choice(choices),
        default=default,
        help="Model size (the vocab size comes from the shards or --vocab). bert: tiny L2/H128, mini L4/H256, "
        "small L4/H512, medium L8/H512, base L12/H768, large L24/H1024. modernbert (train): tiny L4/H128, mini "
        "L7/H256, small L10/H512, base L22/H768, large L28/H1024. train: resuming takes the checkpoint's (as for "
        "every model option); finetune: without --model, the size of a randomly initialised model (needs --vocab).",
    )


def kernel_options(config: type):
    """``--kernels``, ``--compile-mode`` and ``--pad-vocab-size-multiple`` (``loop_config.KernelConfig``, whose
    field docstrings are their help): how fast the model's own code runs, never what it computes. ``config``
    is the command's config class (its defaults)."""
    from bertprep.bert_model.loop_config import COMPILE_MODES
    from bertprep.bert_model.models.bert_config import KERNELS

    return apply(
        field_option(config, "kernels", type=click.Choice(KERNELS)),
        field_option(config, "compile_mode", type=click.Choice(COMPILE_MODES)),
        field_option(config, "pad_vocab_size_multiple", type=click.IntRange(min=1)),
    )


# Options that several commands have with one meaning and a per-command detail: one help text each, which says
# what the option is and then what each command does with it (tests/cli/test_option_help.py).

_MAX_SEQ_LENGTH_HELP = (
    "Word pieces per sequence, [CLS] and [SEP] included (the original's max_seq_length). make-shards: tokens per "
    "instance (paper: 128 for 90% of steps, then 512); finetune: longer inputs are cut (default 128; squad 384: "
    "context windows); predict: default the fine-tuning's; extract-features: longer lines are cut (pairs "
    "longest-first), default 128, or the model's max_position_embeddings when smaller; finetune --task retrieval: "
    "default 256 or the model's positions when fewer."
)
_BATCH_SIZE_HELP = (
    "Examples per batch. train: instances per micro-batch on each process (global batch = this x accumulation x "
    "processes); finetune: the training batch (paper: 32); predict, fill-mask: inputs per forward pass; "
    "extract-features: lines per forward pass and per Arrow record batch (what is in memory at a time)."
)
_MASKED_LM_PROB_HELP = (
    "Fraction of tokens to predict (paper section 3.1); each is [MASK] 80%, random 10%, kept 10% of the time. "
    "make-shards: the shards' rate (static masking: fixed in the rows; dynamic: recorded for the trainer); train: "
    "a rate instead of the shards' (e.g. 0.3 for ModernBERT), for shards made with --masking dynamic only; "
    "max_predictions_per_seq scales with it."
)

_TASK_HELP = (
    "What to train. train: pretrain = masked LM + next-sentence prediction on shards (the only task so far). "
    "finetune: glue = sentence (pair) classification / regression from TSV; squad = extractive QA from SQuAD "
    "v1.1 or v2.0 JSON; ner = token classification from CoNLL TOKEN<TAB>TAG files; multiple-choice = pick one of "
    "N endings (SWAG CSV, or other CSV/TSV/JSONL via the column options); retrieval = a bi-encoder trained with "
    "in-batch negatives on query / positive [/ negative] pairs (TSV, JSONL or a BEIR folder's train qrels)."
)
_VERIFY_HELP = (
    "Check the shards against their manifest: every file's sha256, so that a truncated or altered shard is named "
    "instead of read. train: before training (costs one read of the shards: 0.14 s for the 163 MB of the "
    "make-shards benchmark in the page cache, about 1 s per GB; from disk, one read at disk speed). inspect: "
    "also the counts, and every row: length <= max_seq_length, [CLS] first, [SEP] last, masked positions; per "
    "objective: nsp/sop exactly two [SEP], token types 0 then 1, A and B not empty, label share as in the "
    "manifest; none: token types 0, every row full but the last of each bucket, document separators as "
    "counted; exits 1 on any problem."
)


def max_seq_length_option(**attrs: Any):
    """``--max-seq-length`` (make-shards, finetune, predict, extract-features): one help text; ``attrs`` give the
    command's type (default ``IntRange(min=3)``) and default (default None: the command decides)."""
    attrs.setdefault("type", click.IntRange(min=3))
    attrs.setdefault("default", None)
    return click.option("--max-seq-length", help=_MAX_SEQ_LENGTH_HELP, **attrs)


def batch_size_option(config: type):
    """``--batch-size`` (train, finetune, predict, fill-mask, extract-features): one help text, the default of
    ``config``'s ``batch_size`` field."""
    return field_option(config, "batch_size", type=click.IntRange(min=1), help=_BATCH_SIZE_HELP)


def task_option(**attrs: Any):
    """``--task`` (train: the pre-training task; finetune: the fine-tuning task): one help text; ``attrs`` give
    the command's choices and default."""
    return click.option("--task", help=_TASK_HELP, **attrs)


def verify_option(*decls: str, **attrs: Any):
    """``--verify`` (train: the shards' sha256 before training, on by default; inspect: every row too): one help
    text; ``decls`` and ``attrs`` give the command's flag form and default."""
    return click.option(*(decls or ("--verify",)), help=_VERIFY_HELP, **attrs)


def masked_lm_prob_option(**attrs: Any):
    """``--masked-lm-prob`` (make-shards: the masked-LM rule's rate; train: a dynamic-masking rate instead of the
    shards'): one help text; ``attrs`` give the command's type and default."""
    attrs["type"] = finite_float_type(attrs.get("type", float))
    return click.option("--masked-lm-prob", help=_MASKED_LM_PROB_HELP, **attrs)


def _check_optimizer(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse an optimizer whose package is missing before any work starts (one line: the extra to install)."""
    if value != "adamw":
        from bertprep.bert_model.optim import optimizer_class

        try:
            optimizer_class(value)
        except ValueError as err:
            raise click.BadParameter(str(err).removeprefix(f"--optimizer {value} "), ctx=ctx, param=param) from None
    return value


def recipe_options(config: type):
    """The options of today's training recipes, one group applied by ``train`` with one line: ``--optimizer`` and
    the learning-rate schedule's (``OptimConfig``), then ``--phase`` and the batch-size warm-up's
    (``TrainConfig``). Help is the fields' docstrings; ``config`` is the command's config class (its defaults)."""
    from bertprep.bert_model.loop_config import OPTIMIZER_NAMES
    from bertprep.bert_model.schedules import BATCH_WARMUP_SHAPES, DECAY_SHAPES, LR_SCHEDULES

    return apply(
        field_option(config, "optimizer", type=click.Choice(OPTIMIZER_NAMES), callback=_check_optimizer),
        field_option(config, "lr_schedule", type=click.Choice(LR_SCHEDULES)),
        field_option(config, "decay_fraction", type=click.FloatRange(0, 1)),
        field_option(config, "decay_steps", type=click.IntRange(min=0)),
        field_option(config, "decay_shape", type=click.Choice(DECAY_SHAPES)),
        field_option(config, "min_lr_ratio", type=click.FloatRange(0, 1)),
        field_option(config, "polynomial_power", type=click.FloatRange(0, min_open=True)),
        field_option(config, "warmup_tokens", type=click.IntRange(min=0)),
        field_option(config, "phases", "--phase", "phases", multiple=True, metavar="KEY=VALUE,..."),
        field_option(config, "global_batch_size", type=click.IntRange(min=1)),
        field_option(config, "batch_size_warmup_tokens", type=click.IntRange(min=0)),
        field_option(config, "batch_size_warmup_shape", type=click.Choice(BATCH_WARMUP_SHAPES)),
        field_option(config, "batch_size_start", type=click.IntRange(min=1)),
    )


def _parse_set(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, Any]:
    """``--set KEY=V1,V2`` -> {KEY: [V1, V2]} (finite numbers); the grid refuses an unknown KEY."""
    out: dict[str, Any] = {}
    for item in value:
        key, sep, values = item.partition("=")
        try:
            if not sep:
                raise ValueError
            numbers = [float(v) if any(c in v for c in ".eE") else int(v) for v in values.split(",")]
        except ValueError:
            numbers = None
        if numbers is None or any(not math.isfinite(v) for v in numbers):
            raise click.BadParameter(
                f"{item!r}: write KEY=VALUE or KEY=V1,V2 with finite numbers", ctx, param
            ) from None
        out[key.strip()] = numbers
    return out


def evaluation_options(command):
    """The options ``bertprep evaluate glue`` and ``squad`` share: the model, the output folder, the grid,
    seeds and slices (``bert_model.evaluation.config.EvalConfig``, whose defaults they show)."""
    from bertprep.bert_model.evaluation.config import EvalConfig
    from bertprep.bert_model.evaluation.grid import GRID_KEYS, SHIPPED_GRIDS

    default = dataclass_default(EvalConfig)
    options = [
        click.option("-m", "--model", required=True, type=ModelPath(),
                     help="Pre-trained model: a bertprep run or checkpoint, or a Hugging Face BERT or ModernBERT "
                     "directory."),
        click.option("-o", "--output-dir", required=True, type=click.Path(file_okay=False),
                     help="Folder of the runs (runs/TASK/SETTING-seedN/, each a finetune run), the table (.md) and "
                     "every run's numbers (.json). Running the same command again skips the finished runs; a second "
                     "evaluate into a folder that one is writing is refused."),
        click.option("--random-init", is_flag=True, default=default("random_init"),
                     help="Fine-tune the model's architecture from random weights (the 'no pre-training' row)."),
        click.option("--name", default=None,
                     help="The model's row label in the table (default: its folder's name); --random-init "
                     "adds '(random init)'."),
        click.option("--grid", default=default("grid"),
                     help=f"Hyperparameter grid: {', '.join(SHIPPED_GRIDS)} (shipped) or a TOML file of "
                     f"{', '.join(GRID_KEYS)}, each a number or a list to sweep, with [tasks.NAME] tables per task."),
        click.option("--set", "overrides", multiple=True, callback=_parse_set,
                     help="Replace a grid key for every task, e.g. --set learning_rate=3e-5 --set "
                     "num_train_epochs=1 (a comma list sweeps). Repeatable."),
        click.option("--seeds", type=click.IntRange(min=1), default=default("seeds"),
                     help="Runs per setting (different seeds); the table shows the median and the spread."),
        click.option("--max-train-examples", type=click.IntRange(min=1), default=None,
                     help="Fine-tune on the first N training examples of each task (a quick, rougher figure)."),
        click.option("--max-eval-examples", type=click.IntRange(min=1), default=None,
                     help="Score on the first N dev examples of each task."),
        click.option("--device", default=default("device"),
                     help="'auto' (CUDA if available), 'cpu', 'cuda' or 'cuda:N'."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command
