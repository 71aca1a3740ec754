"""BEIR folders, training pairs and SQuAD -> BEIR: what the retrieval commands read, and their one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.bert_model.retrieval.data import load_beir, read_pairs, read_qrels, squad_to_beir
from bertprep.cli.evaluate import evaluate
from bertprep.cli.finetune import finetune
from retrieval_factory import squad_file, write_beir


def _qrels_docs(folder: Path, split: str) -> set[str]:
    return {d for judged in read_qrels(str(folder / "qrels" / f"{split}.tsv")).values() for d in judged}


def test_squad_split_leaks_no_paragraph_between_train_and_test(tmp_path):
    squad = squad_file(tmp_path / "squad.json", articles=9, paragraphs=3, questions=2)
    counts = squad_to_beir(str(squad), str(tmp_path / "beir"), dev_fraction=0.2, test_fraction=0.4)
    train, dev, test = (_qrels_docs(tmp_path / "beir", s) for s in ("train", "dev", "test"))
    assert train and dev and test
    assert not (train & test) and not (train & dev) and not (dev & test)
    # whole articles go to one split: a document id is ARTICLE-PARAGRAPH
    articles = [{d.split("-")[0] for d in docs} for docs in (train, dev, test)]
    assert not (articles[0] & articles[2]) and not (articles[0] & articles[1]) and not (articles[1] & articles[2])
    assert (counts["test_articles"], counts["dev_articles"], counts["train_articles"]) == (4, 2, 3)
    # every question is judged once, relevant to its own paragraph only
    data = load_beir(str(tmp_path / "beir"), "test")
    assert len(data.corpus) == 27 and all(len(j) == 1 for j in data.qrels.values())
    assert sum(counts[f"{s}_queries"] for s in ("train", "dev", "test")) == 9 * 3 * 2


def test_squad_split_is_a_function_of_the_titles(tmp_path):
    squad = squad_file(tmp_path / "squad.json", articles=6)
    squad_to_beir(str(squad), str(tmp_path / "a"))
    data = json.loads(squad.read_text())
    data["data"].reverse()
    (tmp_path / "reversed.json").write_text(json.dumps(data))
    squad_to_beir(str(tmp_path / "reversed.json"), str(tmp_path / "b"))

    def test_titles(folder: Path) -> set[str]:
        corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
        title = {c["_id"]: c["title"] for c in corpus}
        return {title[d] for d in _qrels_docs(folder, "test")}

    assert test_titles(tmp_path / "a") == test_titles(tmp_path / "b")


def test_real_squad_file_splits_without_leaks(shared_data, tmp_path):
    squad_to_beir(str(shared_data / "squad" / "dev-v1.1.json"), str(tmp_path / "beir"), max_articles=12)
    train, test = _qrels_docs(tmp_path / "beir", "train"), _qrels_docs(tmp_path / "beir", "test")
    assert len(train) > 100 and len(test) > 100 and not (train & test)


def test_pairs_from_tsv_jsonl_and_beir_train_qrels(tmp_path):
    (tmp_path / "p.tsv").write_text("query\tpositive\tnegative\nq one\tp one\tn one\nq two\tp two\tn two\n")
    (tmp_path / "p.jsonl").write_text('{"query": "q one", "positive": "p one"}\n\n{"query": "q2", "positive": "p2"}\n')
    assert [p.negative for p in read_pairs(str(tmp_path / "p.tsv"))] == ["n one", "n two"]
    assert [(p.query, p.negative) for p in read_pairs(str(tmp_path / "p.jsonl"))] == [("q one", None), ("q2", None)]
    beir = write_beir(tmp_path / "beir")
    pairs = read_pairs(str(beir))
    assert len(pairs) == 4 and pairs[0].positive.startswith("river")  # title + " " + text


def _cli_error(command, args: list[str]) -> str:
    """The one ``Error:`` line of a failed command (exit status 1 or 2, no traceback)."""
    result = CliRunner().invoke(command, args)
    assert result.exit_code in (1, 2) and isinstance(result.exception, SystemExit), result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: [p.unlink() for p in (d / "qrels").iterdir()] and (d / "qrels").rmdir(), "has no qrels/ folder"),
        (lambda d: (d / "queries.jsonl").write_text(""), "queries.jsonl: no queries"),
        (
            lambda d: (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq3\tmissing-doc\t1\n"),
            "corpus-id 'missing-doc' (query 'q3') is not in corpus.jsonl",
        ),
        (lambda d: (d / "corpus.jsonl").write_text('{"_id": "d0"\n'), "corpus.jsonl:1: not JSON"),
    ],
    ids=["no-qrels", "empty-queries", "missing-doc", "bad-json"],
)
def test_bad_beir_folder_is_one_line(tmp_path, tiny_checkpoint_run, damage, message):
    beir = write_beir(tmp_path / "beir")
    damage(beir)
    line = _cli_error(
        evaluate, ["retrieval", "-m", str(tiny_checkpoint_run), "--data", str(beir), "-o", str(tmp_path / "out")]
    )
    assert line.startswith("Error: ") and message in line
    assert not (tmp_path / "out").exists()  # nothing written that looks like a result


def test_model_without_tokenizer_is_one_line(tmp_path, tiny_checkpoint_run):
    from bertprep.bert_model.hf.export import export_model

    model = tmp_path / "model"
    export_model(str(tiny_checkpoint_run), str(model))  # a Hugging Face directory, then its tokenizer goes
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (model / name).unlink(missing_ok=True)
    beir = write_beir(tmp_path / "beir")
    line = _cli_error(evaluate, ["retrieval", "-m", str(model), "--data", str(beir), "-o", str(tmp_path / "o")])
    assert "has no vocab.txt or tokenizer.json" in line
    line = _cli_error(
        finetune, ["--task", "retrieval", "-m", str(model), "--train-file", str(beir), "-o", str(tmp_path / "ft")]
    )
    assert "has no tokenizer" in line and not (tmp_path / "ft").exists()


def test_squad_to_beir_command_and_a_file_that_is_not_squad(tmp_path):
    squad = squad_file(tmp_path / "squad.json", articles=4)
    result = CliRunner().invoke(evaluate, ["squad-to-beir", "-i", str(squad), "-o", str(tmp_path / "beir")])
    assert result.exit_code == 0, result.output
    assert "12 documents" in result.output and (tmp_path / "beir" / "qrels" / "train.tsv").is_file()
    (tmp_path / "bad.json").write_text("[1, 2]")
    line = _cli_error(evaluate, ["squad-to-beir", "-i", str(tmp_path / "bad.json"), "-o", str(tmp_path / "b2")])
    assert "not a SQuAD JSON file" in line and not (tmp_path / "b2").exists()
