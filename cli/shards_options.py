"""``make-shards``' command line turned into the library's objects: its options into a :class:`ShardsConfig`,
its pass-through arguments checked against Beam's own parser.

- :func:`shards_config`: the command's options (a dict keyed by ``MaskingConfig`` / ``InstanceConfig`` /
  ``ShardsConfig`` field names, plus ``input_files``) -> the config, loading the vocab once to settle the
  casing; ``-i`` values, ``--source`` and ``--mixture`` are parsed here (:func:`split_inputs`,
  :func:`parse_source`, :func:`mixture_sources`). A bad value raises ``click.BadParameter`` naming the option.
- :func:`check_beam_args`: arguments that neither make-shards nor Beam parses are refused before anything
  runs, with the nearest option named (Beam itself would only log a warning and drop them).

The run itself (worker processes, logs, Ctrl-C) is ``pipeline/beam/session.py``'s; the Beam arguments reach it
as they were given, and ``run.run_make_shards`` turns them into the run's one ``PipelineOptions``. Beam is
imported only inside :func:`check_beam_args`, after the session has forked the local workers.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Mapping, Sequence

import click

from bertprep.pipeline.config import InstanceConfig, ShardsConfig, Source
from bertprep.pipeline.masking.config import MaskingConfig

_INSTANCE_FIELDS = {f.name for f in dataclasses.fields(InstanceConfig)} - {"mlm"}
_INSTANCE_FIELDS |= {f.name for f in dataclasses.fields(MaskingConfig)}
_SHARDS_FIELDS = {f.name for f in dataclasses.fields(ShardsConfig)} - {"instance", "inputs"}


def split_inputs(values: Sequence[str]) -> tuple[str, ...]:
    """``-i`` values -> input patterns: each value may hold several, comma-separated."""
    return tuple(p.strip() for value in values for p in value.split(",") if p.strip())


def parse_source(value: str) -> Source:
    """``NAME=GLOBS[:WEIGHT]`` -> :class:`Source` (a trailing ``:number`` is the weight; globs may hold ``:``,
    as in ``gs://``).

    Raises:
        click.BadParameter: (``--source``) no ``=``, an empty name or globs, or a weight :class:`Source` refuses.
    """
    name, sep, rest = value.partition("=")
    if not sep or not name.strip() or not rest.strip():
        raise click.BadParameter(
            f"expected NAME=GLOBS[:WEIGHT], e.g. wiki='wiki/*':2.0, got {value!r}", param_hint="--source"
        )
    weight = 1.0
    head, colon, tail = rest.rpartition(":")
    if colon:
        try:
            weight = float(tail)
            rest = head
        except ValueError:
            pass  # a ':' of the globs
    try:
        return Source(name.strip(), split_inputs([rest]), weight)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--source") from err


_MIXTURE_KEYS = ("sources", "temperature_alpha")
_SOURCE_KEYS = ("name", "inputs", "weight")


def _check_mixture_keys(path: str, spec) -> None:
    """Refuse a --mixture file with a key it does not define (a top-level "weights", a "wieght" typo were
    ignored) or no source (``{"sources": []}`` made shards of the bundled demo corpus).

    Raises:
        click.BadParameter: (``--mixture``) an unknown key, with the nearest known one; an empty source list.
    """
    import difflib

    def refuse(where: str, key: str, allowed: tuple) -> None:
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise click.BadParameter(
            f"{path}: unknown key {key!r} {where}; {hint}the keys are {', '.join(allowed)}", param_hint="--mixture"
        )

    if not isinstance(spec, dict):
        return  # (the caller's message: expected {"sources": [...]})
    for key in spec:
        if key not in _MIXTURE_KEYS:
            refuse("at the top level", key, _MIXTURE_KEYS)
    if isinstance(spec.get("sources"), list) and not spec["sources"]:
        raise click.BadParameter(
            f'{path}: "sources" is empty; list at least one source (name, inputs, weight)', param_hint="--mixture"
        )
    for i, item in enumerate(spec.get("sources") or ()):
        for key in item if isinstance(item, dict) else ():
            if key not in _SOURCE_KEYS:
                refuse(f"in source {i + 1} ({item.get('name', '?')!r})", key, _SOURCE_KEYS)


def mixture_sources(options: Mapping) -> tuple[tuple, float | None]:
    """The sources and temperature of ``--source`` / ``--mixture`` / ``--mixture-alpha`` (``((), None)`` without).

    Raises:
        click.BadParameter: both ``--source`` and ``--mixture``, or a mixture file that cannot be read as
            ``{"sources": [{"name", "inputs", "weight"}], "temperature_alpha": optional}``.
    """
    alpha = options.get("mixture_alpha")
    if options.get("mixture") and options.get("sources"):
        raise click.BadParameter("give sources with --source or --mixture, not both", param_hint="--mixture")
    if options.get("mixture"):
        import json

        path = options["mixture"]
        try:
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
            _check_mixture_keys(path, spec)
            sources = []
            for item in spec["sources"]:
                inputs = item["inputs"]
                inputs = split_inputs([inputs] if isinstance(inputs, str) else inputs)
                sources.append(Source(str(item["name"]), inputs, float(item.get("weight", 1.0))))
        except click.BadParameter:
            raise
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise click.BadParameter(
                f'{path}: expected {{"sources": [{{"name", "inputs", "weight"}}], '
                f'"temperature_alpha": optional}}: {err}',
                param_hint="--mixture",
            ) from err
        if alpha is None and spec.get("temperature_alpha") is not None:
            alpha = float(spec["temperature_alpha"])
        return tuple(sources), alpha
    return tuple(parse_source(v) for v in options.get("sources") or ()), alpha


def shards_config(options: Mapping, explicit: frozenset[str] = frozenset()) -> tuple[ShardsConfig, object, list]:
    """The ``ShardsConfig`` of a command line, the loaded vocab, and the warnings to show.

    ``options``: ``input_files`` (the ``-i`` values) and any ``MaskingConfig`` / ``InstanceConfig`` /
    ``ShardsConfig`` field by name. ``explicit``: the names of the options the user gave (the others are
    defaults), for warnings about options that have no effect. With no input the bundled demo corpus is read (a
    warning says so).

    Raises:
        click.BadParameter: a value the configs refuse, a word segmenter that cannot be loaded, a vocab that
            cannot be used or that contradicts ``--do-lower-case`` / ``--strip-accents``.
    """
    try:
        instance = InstanceConfig.from_flat(**{k: v for k, v in options.items() if k in _INSTANCE_FIELDS})
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
    _check_word_segmenter(options.get("word_segmenter"))
    vocab, do_lower_case, strip_accents, warnings = _vocab_and_text_settings(options, instance)
    _refuse_a_guessed_normalization(vocab, do_lower_case, strip_accents, warnings, explicit)
    if instance.objective == "none" and "short_seq_prob" in explicit:
        warnings.append("--short-seq-prob is not used with --objective none (every row is filled to --max-seq-length)")
    warnings += _options_without_effect(instance, options, explicit)
    inputs, sources, mixture_alpha = _inputs_and_sources(options, warnings)
    settings = {k: v for k, v in options.items() if k in _SHARDS_FIELDS}
    settings.update(do_lower_case=do_lower_case, strip_accents=strip_accents)
    settings.update(sources=sources, mixture_alpha=mixture_alpha)
    settings["decontaminate"] = split_inputs(options.get("decontaminate") or ())
    if settings.get("mds_hashes") is None:
        settings.pop("mds_hashes", None)  # (the config's default: no hashes)
    elif isinstance(settings["mds_hashes"], str):  # --mds-hashes sha1,xxh64
        settings["mds_hashes"] = split_inputs([settings["mds_hashes"]]) if settings["mds_hashes"] else ()
    try:
        config = ShardsConfig(inputs=inputs, instance=instance, **settings)
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
    _check_output_format(config, vocab)
    return config, vocab, warnings


def _check_word_segmenter(name: str | None) -> None:
    """Load the ``--word-segmenter`` ``name`` (if any) now, so that one that cannot be loaded fails here, before
    any worker starts: ``click.BadParameter`` naming the option."""
    if name:
        from bertprep.pipeline.text.word_segmentation import WordSegmenterError, load_word_segmenter

        try:
            load_word_segmenter(name)  # fail here, before any worker starts
        except WordSegmenterError as err:
            raise click.BadParameter(str(err), param_hint="--word-segmenter") from err


def _vocab_and_text_settings(options: Mapping, instance: InstanceConfig) -> tuple[object, bool, bool | None, list]:
    """``(vocab, do_lower_case, strip_accents, warnings)``: the ``--vocab`` loaded, the casing and accent settings
    the options and the vocab resolve to (``resolve_text_settings``) with their warnings, and the tokenizer
    checked against the masking scheme and word segmenter. ``click.BadParameter`` (naming the option) for a vocab
    that cannot be used or that an option contradicts."""
    from bertprep.pipeline.text.tokenization import (
        VocabError,
        check_tokenizer_options,
        load_vocab,
        resolve_text_settings,
    )

    try:
        vocab = load_vocab(options["vocab"])
    except VocabError as err:
        raise click.BadParameter(str(err), param_hint="--vocab") from err
    try:
        do_lower_case, strip_accents, warnings = resolve_text_settings(
            vocab, options.get("do_lower_case"), options.get("strip_accents")
        )
        check_tokenizer_options(vocab, instance.mlm.effective_masking_scheme, options.get("word_segmenter"))
    except VocabError as err:  # an option contradicts what the tokenizer.json records
        raise click.BadParameter(str(err), param_hint=err.option or "--vocab") from err
    return vocab, do_lower_case, strip_accents, list(warnings)


def _inputs_and_sources(options: Mapping, warnings: list) -> tuple[tuple[str, ...], tuple, float | None]:
    """``(inputs, sources, mixture_alpha)``: the ``-i`` patterns, or those of the ``--source`` / ``--mixture``
    sources (``mixture_sources``), or the bundled demo corpus (appending a warning that says so to
    ``warnings``). ``click.BadParameter`` when both ``-i`` and sources are given."""
    inputs = split_inputs(options.get("input_files") or ())
    sources, mixture_alpha = mixture_sources(options)
    if sources and inputs:
        raise click.BadParameter(
            "give inputs with -i or with --source/--mixture, not both (a source names its own globs)"
        )
    inputs = inputs or tuple(p for source in sources for p in source.inputs)
    if not inputs:
        from bertprep.pipeline import demo_corpus_dir

        inputs = (demo_corpus_dir(),)
        warnings.append(f"No -i/--input given: using the bundled demo corpus {inputs[0]}")
    return inputs, sources, mixture_alpha


def _check_output_format(config: ShardsConfig, vocab) -> None:
    """Refuse, before any work, an output format whose library is missing or that cannot hold the vocab
    (``shards.formats.check_output_format``)."""
    from bertprep.pipeline.shards.formats import FormatError, check_output_format

    try:
        check_output_format(config.output_format, vocab.size, config.mds_compression, config.mds_hashes)
    except FormatError as err:
        raise click.BadParameter(str(err), param_hint="--output-format") from err


def _refuse_a_guessed_normalization(vocab, do_lower_case: bool, strip_accents, warnings: list, explicit) -> None:
    """Refuse a vocab.txt alone (no tokenizer.json records how it was built) whose entries contradict the
    default casing or accent stripping, unless the user gave them: a syllable vocab copied without its
    tokenizer.json was warned about and then made shards of 77% [UNK]. (A consistent setting that is only
    poor for a script, a jamo vocab with stripping, stays a warning.)

    Raises:
        click.BadParameter: (``--vocab``) the warnings about it, and which option to give.
    """
    from bertprep.core.normalization import resolve_strip_accents, vocab_strip_accents

    if vocab.do_lower_case is not None or explicit & {"do_lower_case", "strip_accents"}:
        return
    built_stripped = vocab_strip_accents(vocab.tokens)
    casing = vocab.looks_cased() and do_lower_case
    stripping = built_stripped is not None and built_stripped != resolve_strip_accents(strip_accents, do_lower_case)
    if casing or stripping:
        raise click.BadParameter(
            f"{'; '.join(warnings)}. {vocab.source} alone does not record how it was built (no tokenizer.json "
            "beside it), so make-shards does not run on a guess: give the option (or the default's own flag to "
            "keep it)",
            param_hint="--vocab",
        )


def _options_without_effect(instance: InstanceConfig, options: Mapping, explicit: frozenset[str]) -> list[str]:
    """Warnings for options given that change nothing here, and for a --max-predictions-per-seq that caps the
    masking below --masked-lm-prob (0.3 at 128 tokens with the default 20 masked 15.8%, without a word)."""
    out = []
    if options.get("dedup") != "minhash":
        for name in sorted(explicit & {"dedup_threshold", "dedup_ngram"}):
            flag = "--" + name.replace("_", "-")
            out.append(f"{flag} is used by --dedup minhash only; with --dedup {options.get('dedup')} it has no effect")
    mlm = instance.mlm
    pieces = instance.max_seq_length - 3  # a full instance's word pieces ([CLS] and two [SEP] are never masked)
    wanted = round(pieces * mlm.masked_lm_prob)
    if wanted > mlm.max_predictions_per_seq:
        out.append(
            f"--max-predictions-per-seq {mlm.max_predictions_per_seq} caps the masked word pieces of a full "
            f"instance at {mlm.max_predictions_per_seq / pieces:.1%}, below --masked-lm-prob "
            f"{mlm.masked_lm_prob}; raise it to about {wanted} (max_seq_length x masked_lm_prob: the original "
            "uses 20 at 128 tokens, 76-80 at 512)"
        )
    return out


def beam_parser(args: Sequence[str]):
    """Beam's own parser of ``args`` (``PipelineOptions.get_all_options``: every options class known at that
    moment), with the runner named by ``--runner`` imported first so that its options count too. One
    ``PipelineOptions`` of ``args`` is made.

    Raises:
        ValueError: ``--runner`` names a runner Beam cannot create (Beam's reason).
    """
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(list(args))
    runner = options.view_as(StandardOptions).runner
    if runner:
        from bertprep.pipeline.beam import dask_runner_name

        if dask_runner_name(runner):  # Beam's table of short names lacks it; its options are Beam's DaskOptions
            runner = "apache_beam.runners.dask.dask_runner.DaskRunner"
        try:
            from apache_beam.runners.runner import create_runner

            create_runner(runner)  # imports the runner's module, which defines its options classes
        except Exception as err:  # Beam's own reason, not "no such option" for the runner's options
            raise ValueError(f"--runner={runner}: Beam cannot create this runner: {err}") from err
    parsers: list = []  # (argparse parsers, given by Beam)
    beam_log = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)  # its "Discarding unparseable args" warning: reported here instead
    try:
        options.get_all_options(add_extra_args_fn=parsers.append)
    finally:
        beam_log.setLevel(level)
    return parsers[0]


def unknown_beam_args(beam_args: Sequence[str]) -> list[str]:
    """The arguments in ``beam_args`` that no Beam ``PipelineOptions`` class parses (a mistyped option,
    a stray value), in order; empty when Beam knows them all (:func:`beam_parser`).

    Raises:
        ValueError: ``--runner`` names a runner Beam cannot create.
    """
    args = list(beam_args)
    if not args:
        return []
    _, unknown = beam_parser(args).parse_known_args(args)
    return list(unknown)


def check_beam_args(ctx: click.Context, beam_args: Sequence[str]) -> None:
    """Refuse arguments that neither make-shards nor Beam's ``PipelineOptions`` parses, before anything runs
    (Beam itself would only log a warning and drop them, so ``--dupe-factr 3`` would run with the default).

    Raises:
        click.UsageError: naming the first unknown option and the nearest make-shards (or Beam) option; or
            Beam's reason why the ``--runner`` it names cannot be created.
    """
    try:
        unknown = unknown_beam_args(beam_args)
    except ValueError as err:  # a --runner Beam cannot create: Beam's reason
        raise click.UsageError(str(err), ctx) from err
    if not unknown:
        return
    options = [arg.split("=", 1)[0] for arg in unknown if arg.startswith("-")]
    if not options:
        raise click.UsageError(
            f"unexpected argument {unknown[0]!r}; input files are given with -i/--input (comma-separated or repeated)",
            ctx,
        )
    name = options[0]
    ours = sorted(
        {opt for param in ctx.command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")}
    )
    beam_names = sorted({s for action in beam_parser([])._actions for s in action.option_strings if s.startswith("--")})
    close = difflib.get_close_matches(name, ours, n=1, cutoff=0.6) or difflib.get_close_matches(
        name, beam_names, n=1, cutoff=0.75
    )
    hint = f"; did you mean {close[0]}?" if close else "; see bertprep make-shards --help"
    more = f" (and {', '.join(options[1:])})" if len(options) > 1 else ""
    raise click.UsageError(
        f"no such option: {name}{more}: neither a make-shards option nor a Beam pipeline option{hint}", ctx
    )
