"""``bertprep finetune``: options -> task + ``FinetuneConfig`` -> ``bertprep.bert_model.tasks.finetune.finetune``."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

import click

# Settings and choices only (torch-free: --help imports no torch); the work through the wrappers below.
from bertprep.bert_model.models.bert_config import PRESETS
from bertprep.bert_model.retrieval.config import POOLINGS as RETRIEVAL_POOLINGS
from bertprep.bert_model.retrieval.config import RetrievalTrainConfig
from bertprep.bert_model.tasks.config import GLUE_TASKS, FinetuneConfig
from bertprep.cli.options import (
    batch_size_option,
    casing_options,
    column_options,
    dataclass_default,
    field_option,
    loop_options,
    max_seq_length_option,
    model_option,
    model_vocab_option,
    optimizer_options,
    output_dir_option,
    overwrite_option,
    preset_option,
    squad_options,
    stop_options,
    task_option,
)
from bertprep.cli.run_lock import run_directory_lock

if TYPE_CHECKING:
    from bertprep.bert_model.retrieval.train import RetrievalTrainResult
    from bertprep.bert_model.tasks.finetune import FinetuneResult
    from bertprep.bert_model.tasks.registry import Task

GLUE_TASK_NAMES = tuple(GLUE_TASKS)


# The work, imported when a run starts (it imports torch, scikit-learn, sentence-transformers; --help needs none).
def make_task(name: str, **options: Any) -> Task:
    """``tasks.registry.make_task``."""
    from bertprep.bert_model.tasks.registry import make_task as make

    return make(name, **options)


def run_finetune(config: FinetuneConfig, task: Task) -> FinetuneResult:
    """``tasks.finetune.finetune``."""
    from bertprep.bert_model.tasks.finetune import finetune as run

    return run(config, task)


def train_bi_encoder(config: RetrievalTrainConfig) -> RetrievalTrainResult:
    """``retrieval.train.train_bi_encoder``."""
    from bertprep.bert_model.retrieval.train import train_bi_encoder as run

    return run(config)


def _split_list(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise click.BadParameter("give a comma-separated list", ctx=ctx, param=param)
    return items


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@task_option(required=True, type=click.Choice(["glue", "squad", "ner", "multiple-choice", "retrieval"]))
@click.option(
    "--train-file",
    required=True,
    type=click.Path(exists=True),
    help="Training data (GLUE train.tsv, SQuAD JSON, or CoNLL file; retrieval: a query<TAB>positive[<TAB>negative] "
    "TSV, a JSONL file with those keys, or a BEIR folder, whose qrels/train.tsv pairs are used).",
)
@click.option(
    "--eval-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Evaluation data, same format; evaluated after each epoch, the best model is kept.",
)
@output_dir_option(type=click.Path(file_okay=False))
@model_option(
    "init_from",
    default=None,
    help="Pre-trained model: a bertprep checkpoint or run directory, or a Hugging Face BERT or ModernBERT "
    "directory (config.json + model.safetensors / pytorch_model.bin + vocab.txt). Its architecture picks the "
    "head: BertFor... or, for ModernBERT, transformers' ModernBertFor... of the task.",
)
@click.option(
    "--random-init",
    is_flag=True,
    default=False,
    help="Use --model's config and vocab but random weights (the 'no pre-training' baseline).",
)
@preset_option(list(PRESETS), None)
@model_vocab_option()
@casing_options()
# GLUE
@click.option(
    "--glue-task",
    type=click.Choice(GLUE_TASK_NAMES),
    default=None,
    help="GLUE task preset: columns, labels and metrics of its train.tsv / dev.tsv.",
)
@column_options()
@click.option(
    "--labels",
    callback=_split_list,
    default=None,
    help="Comma-separated labels in class order (glue: default from the preset or the training file; "
    "ner: default from the training file).",
)
@click.option(
    "--regression",
    "is_regression",
    is_flag=True,
    default=None,
    help="The label is a number; train a regression head with MSE (as STS-B).",
)
@click.option(
    "--metrics",
    callback=_split_list,
    default=None,
    help="Comma-separated metrics: accuracy, f1, matthews_corrcoef, pearson, spearman; the first picks "
    "the best model (default: GLUE's for the preset).",
)
# NER, feature-based
@click.option(
    "--feature-based",
    type=click.Choice(["last4-concat", "last4-sum", "second-to-last", "last", "embeddings"]),
    default=None,
    help="ner: the paper's feature-based approach (5.3, Table 7): freeze the encoder and train a two-layer "
    "BiLSTM + classifier on these activations (last4-concat = the last four layers concatenated). "
    "The BiLSTM starts from scratch: use a larger --lr, e.g. 1e-3.",
)
@click.option(
    "--lstm-hidden-size",
    type=click.IntRange(min=1),
    default=None,
    help="ner --feature-based: BiLSTM units per direction (default: the model's hidden size).",
)
# multiple choice
@click.option(
    "--context-column",
    default=None,
    help="multiple-choice: column (or JSON field) of the context, the first segment (default 'sent1').",
)
@click.option(
    "--question-column",
    default=None,
    help="multiple-choice: column put before every ending in the second segment (default 'sent2', "
    "SWAG's start of the next sentence); '' for none.",
)
@click.option(
    "--ending-columns",
    callback=_split_list,
    default=None,
    help="multiple-choice: comma-separated columns of the N candidates (default "
    "ending0,ending1,ending2,ending3), or one JSON field holding the list.",
)
@click.option(
    "--id-column",
    default=None,
    help="multiple-choice: column of an example id for the predictions CSV (default: row number).",
)
@click.option(
    "--input-format",
    type=click.Choice(["auto", "csv", "tsv", "jsonl"]),
    default=None,
    help="multiple-choice: file layout (default auto: from the extension, .csv / .tsv / .jsonl).",
)
# retrieval
@click.option(
    "--embedding-pooling",
    "pooling",
    type=click.Choice(list(RETRIEVAL_POOLINGS)),
    default=dataclass_default(RetrievalTrainConfig)("pooling"),
    help="retrieval: one vector per text from the last layer: mean (of every piece, Sentence-BERT's) or cls "
    "(the [CLS] vector, DPR's). retrieval's defaults differ: --lr 2e-5, --num-train-epochs 1 (sentence-transformers').",
)
# shared / SQuAD
@max_seq_length_option()
@squad_options()
@click.option(
    "--max-query-length", type=click.IntRange(min=1), default=None, help="squad: question pieces kept (default 64)."
)
@click.option(
    "--n-best-size",
    type=click.IntRange(min=1),
    default=None,
    help="squad: start / end candidates per window (default 20).",
)
@click.option(
    "--train-articles", default=None, help="squad: START:END range of the training file's articles to use, e.g. 0:30."
)
@click.option(
    "--eval-articles", default=None, help="squad: START:END range of the evaluation file's articles to use, e.g. 30:."
)
@click.option(
    "--train-paragraphs",
    default=None,
    help="squad: START:END range of the training file's paragraphs (passages, counted over the chosen "
    "articles), e.g. 0:60; with --eval-paragraphs 60: one file splits by passage.",
)
@click.option(
    "--eval-paragraphs", default=None, help="squad: START:END range of the evaluation file's paragraphs, e.g. 60:."
)
# training
@optimizer_options(FinetuneConfig)
@batch_size_option(FinetuneConfig)
@field_option(FinetuneConfig, "eval_batch_size", type=click.IntRange(min=1))
@field_option(FinetuneConfig, "num_train_epochs", type=click.FloatRange(min=0, min_open=True))
@stop_options(FinetuneConfig)
@field_option(FinetuneConfig, "warmup_proportion", type=click.FloatRange(0, 1, max_open=True))
@loop_options(FinetuneConfig)
@click.option(
    "--max-train-examples",
    type=click.IntRange(min=1),
    default=None,
    help="Use the first N training examples (questions for squad, sentences for ner).",
)
@click.option("--max-eval-examples", type=click.IntRange(min=1), default=None, help="Evaluate on the first N examples.")
@overwrite_option()
@click.pass_context
def finetune(ctx: click.Context, task: str, glue_task: str | None, max_seq_length: int | None, **options) -> None:
    """Fine-tune a pre-trained BERT or ModernBERT on a GLUE-style, SQuAD v1.1 / v2.0, NER or multiple-choice
    task. Every task (feature-based NER included) runs on both architectures; a ModernBERT model gets the
    head of transformers' class (ModernBertForSequenceClassification, ...ForQuestionAnswering,
    ...ForTokenClassification, ...ForMultipleChoice) and exports as that class.

    \b
    Examples:
      bertprep finetune --task glue --glue-task sst2 --model runs/mini \\
          --train-file glue/SST-2/train.tsv --eval-file glue/SST-2/dev.tsv -o runs/sst2
      bertprep finetune --task glue --text-a-column 0 --label-column 1 --no-header \\
          --train-file mine.tsv --eval-file mine-dev.tsv --model runs/mini -o runs/mine
      bertprep finetune --task squad --model hf/bert-base-uncased \\
          --train-file train-v1.1.json --eval-file dev-v1.1.json -o runs/squad
      bertprep finetune --task squad --model hf/bert-base-uncased \\
          --train-file train-v2.0.json --eval-file dev-v2.0.json -o runs/squad2
      bertprep finetune --task multiple-choice --model hf/bert-base-uncased \\
          --train-file swag/train.csv --eval-file swag/val.csv -o runs/swag
      bertprep finetune --task ner --model runs/mini --train-file wnut17train.conll \\
          --eval-file emerging.dev.conll -o runs/wnut17
      bertprep finetune --task ner --feature-based last4-concat --lr 1e-3 --model hf/bert-base-cased \\
          --train-file wnut17train.conll --eval-file emerging.dev.conll -o runs/wnut17-features
      bertprep finetune --task squad --model runs/modernbert \\
          --train-file train-v1.1.json --eval-file dev-v1.1.json -o runs/squad-modernbert
      bertprep finetune --task retrieval --model runs/mini --train-file squad-beir/ -o runs/retriever
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if _ran_retrieval(ctx, task, options, max_seq_length):
        return
    task_options = {k: options.pop(k) for k in _TASK_OPTIONS}
    task_options["is_regression"] = task_options["is_regression"] or None  # unset flag: keep the preset's
    try:
        task_obj = make_task(task, glue_task=glue_task, max_seq_length=max_seq_length, **task_options)
        config = FinetuneConfig(**options)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    try:
        with run_directory_lock(config.output_dir, "finetune"):
            result = run_finetune(config, task_obj)
    except (ValueError, FileNotFoundError, FileExistsError, FloatingPointError) as err:
        raise click.ClickException(str(err)) from None
    summary = (
        ""
        if result.best_metrics is None
        else ", ".join(f"{k} {v:.4f}" for k, v in result.best_metrics.items()) + f" at step {result.best_step}; "
    )
    click.echo(
        f"{result.steps} steps ({result.stop_reason}, {result.train_seconds / 60:.1f} min); {summary}"
        f"model {result.best_dir}"
    )


#: finetune's options that set up the task (``registry.make_task``); the others make the ``FinetuneConfig``.
_TASK_OPTIONS = (
    "text_a_column",
    "text_b_column",
    "label_column",
    "header",
    "labels",
    "is_regression",
    "metrics",
    "doc_stride",
    "max_query_length",
    "max_answer_length",
    "n_best_size",
    "train_articles",
    "eval_articles",
    "train_paragraphs",
    "eval_paragraphs",
    "version",
    "null_score_diff_threshold",
    "context_column",
    "question_column",
    "ending_columns",
    "id_column",
    "input_format",
    "feature_based",
    "lstm_hidden_size",
)


#: finetune's options --task retrieval reads (RetrievalTrainConfig fields); any other given is refused.
_RETRIEVAL_OPTIONS = (
    "train_file",
    "output_dir",
    "init_from",
    "random_init",
    "learning_rate",
    "batch_size",
    "num_train_epochs",
    "warmup_proportion",
    "seed",
    "max_train_examples",
    "overwrite",
    "device",
    "progress",
)


def _ran_retrieval(ctx: click.Context, task: str, options: dict, max_seq_length: int | None) -> bool:
    """Run ``--task retrieval`` and say so; for another task, refuse a folder as ``--train-file`` (only
    retrieval reads one) and drop retrieval's ``--pooling``."""
    pooling = options.pop("pooling")
    if task == "retrieval":
        _finetune_retrieval(ctx, options, pooling, max_seq_length)
        return True
    if os.path.isdir(options["train_file"]):
        hint = "--train-file"
        raise click.BadParameter(f"{options['train_file']} is a folder; --task {task} reads a file", param_hint=hint)
    return False


def _finetune_retrieval(ctx: click.Context, options: dict, pooling: str, max_seq_length: int | None) -> None:
    """``--task retrieval``: the options given -> ``RetrievalTrainConfig`` -> ``retrieval.train.train_bi_encoder``
    (sentence-transformers' trainer). Options left at finetune's defaults take the retrieval defaults."""
    source = click.core.ParameterSource
    given = {k for k in options if ctx.get_parameter_source(k) not in (source.DEFAULT, None)}
    unused = sorted(given - set(_RETRIEVAL_OPTIONS))
    if unused:
        name = "--" + unused[0].replace("_", "-")
        raise click.BadParameter(f"{name} does not apply to --task retrieval", param_hint=name)
    if options["init_from"] is None:
        raise click.BadParameter("--task retrieval starts from a model; give --model", param_hint="--model")
    values = {k: options[k] for k in _RETRIEVAL_OPTIONS if k in given or k in ("train_file", "output_dir", "init_from")}
    if max_seq_length is not None:
        values["max_seq_length"] = int(max_seq_length)
    try:
        config = RetrievalTrainConfig(pooling=pooling, **values)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None
    try:
        with run_directory_lock(config.output_dir, "finetune"):
            result = train_bi_encoder(config)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(
        f"{result.steps} steps on {result.pairs} pairs ({result.train_seconds / 60:.1f} min), mean loss "
        f"{result.train_loss:.4f}; model {result.output_dir} (SentenceTransformer(DIR) loads it)"
    )
