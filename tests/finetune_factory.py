"""A tiny 'pre-trained' bertprep checkpoint for the fine-tuning tests (random weights, the fixture vocab), and
the synthetic task files they fine-tune on.

run = write_tiny_checkpoint(tmp_path / "pretrain")   # a run directory finetune --init-from reads
run = write_tiny_modernbert_checkpoint(tmp_path / "pretrain")   # the same for ModernBERT
train, dev = write_sentiment_files(tmp_path)   # trivially learnable synthetic data, seeded: SST-2 TSV,
train, dev = write_ner_files(tmp_path)         # CoNLL name tags,
train, dev = write_squad_files(tmp_path, "2.0")   # SQuAD JSON ("who said" -> a name)
args = sst2_finetune_args(run, train, dev, tmp_path / "ft", epochs=6)   # `bertprep finetune` on the TSV files
args = predict_args(tmp_path / "ft", dev, tmp_path / "pred.tsv")   # `bertprep predict`
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertForMaskedLM
from bertprep.bert_model.optim import create_optimizer
from model_factory import tiny_bert, tiny_modernbert

VOCAB = Path(__file__).parent / "fixtures" / "finetune" / "vocab.txt"
FILLER = "the a is was in of and to it this that he she they said city river year one two three".split()
#: The names the NER files tag (every other word is ``O``).
NAMES = {"john": "B-person", "mary": "B-person", "paris": "B-location", "london": "B-location"}


def tiny_config() -> BertConfig:
    """``model_factory.tiny_bert`` (2 layers, H=32) with an FFN of 64, no dropout, the fixture vocab's size."""
    size = len(VOCAB.read_text().splitlines())
    return BertConfig(
        **tiny_bert(size, intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    )


def write_tiny_checkpoint(run: Path, config: BertConfig | None = None) -> str:
    """Save a seeded random ``BertForPreTraining`` (``config``, default ``tiny_config()``) as step 1 of the
    run directory ``run``, with the fixture vocab; returns ``str(run)``."""
    torch.manual_seed(0)
    return _save_step_1(run, BertForPreTraining(config or tiny_config()))


def tiny_modernbert_config(**overrides) -> ModernBertConfig:
    """4 layers (0 and 3 global, a local window of 8 tokens), H=32, no dropout, the fixture vocab's size and
    special ids."""
    tokens = VOCAB.read_text().splitlines()
    ids = {f"{name}_token_id": tokens.index(f"[{name.upper()}]") for name in ("pad", "cls", "sep")}
    return ModernBertConfig(**tiny_modernbert(len(tokens), **{**ids, **overrides}))


def write_tiny_modernbert_checkpoint(run: Path, config: ModernBertConfig | None = None) -> str:
    """Save a seeded random ``ModernBertForMaskedLM`` (``config``, default ``tiny_modernbert_config()``) as
    step 1 of the run directory ``run``, with the fixture vocab; returns ``str(run)``."""
    torch.manual_seed(0)
    return _save_step_1(run, ModernBertForMaskedLM(config or tiny_modernbert_config()))


def _save_step_1(run: Path, model: torch.nn.Module) -> str:
    state = {"model_config": model.config.to_dict(), "data": {"vocab_sha256": "test"}}
    ckpt.save_checkpoint(
        str(run),
        1,
        model=model,
        optimizer=create_optimizer(model),
        state=state,
        hf_config=model.config.to_hf_dict(),
        vocab_file=str(VOCAB),
    )
    return str(run)


def write_sentiment_files(root: Path, train: int = 192, dev: int = 48) -> tuple[Path, Path]:
    """``root/train.tsv`` and ``root/dev.tsv`` (``train`` and ``dev`` rows) of a keyword task in SST-2's format
    (``sentence<TAB>label`` under a header): 5 :data:`FILLER` words and "good" / "great" (label 1) or "bad" /
    "awful" (0) at a random place. Seeded: the same files every time. Returns the two paths."""
    rng = random.Random(0)
    for name, n in (("train.tsv", train), ("dev.tsv", dev)):
        lines = ["sentence\tlabel"]
        for _ in range(n):
            label = rng.randrange(2)
            words = rng.sample(FILLER, 5)
            words.insert(rng.randrange(6), rng.choice(["good", "great"] if label else ["bad", "awful"]))
            lines.append(f"{' '.join(words)}\t{label}")
        (root / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root / "train.tsv", root / "dev.tsv"


def write_ner_files(root: Path, boundary: str = "\n") -> tuple[Path, Path]:
    """``root/train.conll`` (160 sentences) and ``root/dev.conll`` (40), ``TOKEN<TAB>TAG`` lines: 4 :data:`FILLER`
    words (``O``) and one of :data:`NAMES` at a random place; ``boundary`` ends each sentence (``"\\t\\n"``: a
    TAB-only line, as WNUT-17's train file has). Seeded: the same files every time. Returns the two paths."""
    rng = random.Random(1)
    for name, n in (("train.conll", 160), ("dev.conll", 40)):
        with open(root / name, "w", encoding="utf-8") as f:
            for _ in range(n):
                words = rng.sample(FILLER, 4)
                words.insert(rng.randrange(5), rng.choice(list(NAMES)))
                f.writelines(f"{w}\t{NAMES.get(w, 'O')}\n" for w in words)
                f.write(boundary)
    return root / "train.conll", root / "dev.conll"


def write_squad_files(root: Path, version: str = "1.1") -> tuple[Path, Path]:
    """``root/train.json`` (192 questions) and ``root/dev.json`` (48) in SQuAD ``version``'s format: "who said"
    -> the name ("john" or "mary") among 7 :data:`FILLER` words of the context; in "2.0" every third question is
    "where", with no answer (``is_impossible``). Seeded: the same files every time. Returns the two paths."""
    rng = random.Random(2)
    for name, n in (("train.json", 192), ("dev.json", 48)):
        articles = []
        for k in range(n):
            words = rng.sample(FILLER, 7)
            answer = rng.choice(["john", "mary"])
            words.insert(rng.randrange(8), answer)
            context = " ".join(words)
            qa = {
                "id": f"q{k}",
                "question": "who said",
                "answers": [{"text": answer, "answer_start": context.index(answer)}],
            }
            if version == "2.0":
                qa["is_impossible"] = False
                if k % 3 == 0:
                    qa = {"id": f"q{k}", "question": "where", "answers": [], "is_impossible": True}
            articles.append({"title": str(k), "paragraphs": [{"context": context, "qas": [qa]}]})
        (root / name).write_text(json.dumps({"version": version, "data": articles}), encoding="utf-8")
    return root / "train.json", root / "dev.json"


def sst2_finetune_args(
    init_from: str | Path, train: str | Path, dev: str | Path, output_dir: str | Path, *options: str, epochs: int
) -> list[str]:
    """The arguments of ``bertprep finetune`` (after the program name) of :func:`write_sentiment_files`' task as
    GLUE SST-2 from ``init_from``: sequences of 16 tokens, lr 5e-3, batches of 16, ``epochs`` epochs, no progress
    bar; then ``options``."""
    files = ["--train-file", str(train), "--eval-file", str(dev), "-o", str(output_dir)]
    settings = ["--max-seq-length", "16", "--lr", "5e-3", "--batch-size", "16", "--num-train-epochs", str(epochs)]
    return ["finetune", "--task", "glue", "--glue-task", "sst2", "--init-from", str(init_from), *files, *settings,
            "--no-progress", *options]  # fmt: skip


def predict_args(model: str | Path, input_file: str | Path, output_file: str | Path) -> list[str]:
    """The arguments of ``bertprep predict`` (after the program name): ``model`` on ``input_file`` into
    ``output_file``, no progress bar."""
    return ["predict", "--model", str(model), "--input", str(input_file), "--output", str(output_file), "--no-progress"]
