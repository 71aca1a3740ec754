"""Retrieval metrics, bertprep's encoder against sentence-transformers', fine-tuning, and the resumable evaluation."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval
from click.testing import CliRunner

from bertprep.bert_model.evaluation.harness import load_rows
from bertprep.bert_model.evaluation.table import render_table
from bertprep.bert_model.retrieval import evaluate as retrieval_evaluate
from bertprep.bert_model.retrieval.encoder import RetrievalEncoder, exact_search
from bertprep.bert_model.retrieval.evaluate import RetrievalEvalConfig, evaluate_retrieval
from bertprep.bert_model.retrieval.scoring import mean_metrics, per_query_metrics, read_run, write_run
from bertprep.cli.finetune import finetune
from retrieval_factory import write_beir

TEXTS = ["the river city", "he said one two three", "they", "a year in the city of the river and the city " * 6]


# ------------------------------------------------------------------------------------------------- metrics


def _by_hand(judged: dict[str, int], run: dict[str, float]) -> dict[str, float]:
    """nDCG@10, MRR@10 and Recall@100 from their definitions (the independent reference)."""
    ranked = [d for d, _ in sorted(run.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)]
    dcg = sum(judged.get(d, 0) / math.log2(r + 2) for r, d in enumerate(ranked[:10]))
    ideal = sum(g / math.log2(r + 2) for r, g in enumerate(sorted(judged.values(), reverse=True)[:10]))
    first = next((r for r, d in enumerate(ranked[:10]) if judged.get(d, 0) > 0), None)
    relevant = {d for d, g in judged.items() if g > 0}
    return {
        "ndcg@10": dcg / ideal if ideal else 0.0,
        "mrr@10": 0.0 if first is None else 1 / (first + 1),
        "recall@100": len(relevant & set(ranked[:100])) / len(relevant),
    }


def test_metrics_equal_pytrec_eval_and_the_definitions_on_the_run_file(tmp_path):
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(300)]
    qrels = {f"q{q}": {d: rng.choice([1, 1, 2]) for d in rng.sample(docs, rng.randint(1, 4))} for q in range(40)}
    run = {q: {d: round(rng.random(), 3) for d in rng.sample(docs, 150)} for q in qrels}  # rounding makes ties
    run["q0"] = {}  # a query without results scores 0
    write_run(str(tmp_path / "run.trec"), run)
    from_file = read_run(str(tmp_path / "run.trec"))
    ours = per_query_metrics(qrels, from_file)
    trec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"}).evaluate(from_file)
    for q in qrels:
        expected = _by_hand(qrels[q], from_file.get(q, {}))
        for metric in expected:
            assert ours[q][metric] == pytest.approx(expected[metric], abs=1e-6), (q, metric)
        if q in trec:
            assert ours[q]["ndcg@10"] == pytest.approx(trec[q]["ndcg_cut_10"], abs=1e-6)
            assert ours[q]["recall@100"] == pytest.approx(trec[q]["recall_100"], abs=1e-6)
    assert ours["q0"] == {"ndcg@10": 0.0, "mrr@10": 0.0, "recall@100": 0.0}
    means = mean_metrics(qrels, from_file)
    assert means["mrr@10"] == pytest.approx(np.mean([v["mrr@10"] for v in ours.values()]), abs=1e-12)


def test_mrr_is_cut_at_ten():
    qrels = {"q": {"hit": 1}}
    run = {"q": {**{f"x{i}": 1.0 - i / 100 for i in range(10)}, "hit": 0.5}}  # the hit is 11th
    assert mean_metrics(qrels, run) == {"ndcg@10": 0.0, "mrr@10": 0.0, "recall@100": 1.0}


def test_exact_search_matches_a_full_sort_across_blocks():
    rng = np.random.default_rng(0)
    queries, docs = rng.normal(size=(7, 5)).astype(np.float32), rng.normal(size=(50, 5)).astype(np.float32)
    idx, scores = exact_search(queries, docs, k=9, block=4)
    full = queries @ docs.T
    assert np.array_equal(idx, np.argsort(-full, axis=1, kind="stable")[:, :9])
    assert np.allclose(scores, np.take_along_axis(full, idx, axis=1))


# ------------------------------------------------------------------------------- encoders and fine-tuning


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.slow  # 62 s on 2 busy cores: the first import of sentence-transformers and MiniLM loaded twice
def test_minilm_embeds_the_same_through_bertprep_and_sentence_transformers(minilm_dir, one_torch_thread):
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(str(minilm_dir), device="cpu").encode(TEXTS)
    ours = RetrievalEncoder(str(minilm_dir), device="cpu")
    assert (ours.pooling, ours.max_seq_length) == ("mean", 256)  # read from its sentence-transformers files
    assert _cosines(theirs, ours.encode(TEXTS)).min() >= 0.9999


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_finetuned_directory_loads_everywhere_with_the_same_embeddings(
    tmp_path, tiny_checkpoint_run, one_torch_thread, pooling
):
    from sentence_transformers import SentenceTransformer

    from bertprep.bert_model.inference.features import FeatureConfig, extract_features, read_features

    (tmp_path / "pairs.jsonl").write_text(
        "".join(
            json.dumps({"query": f"{w} city", "positive": f"the {w} river", "negative": f"{w} said"}) + "\n"
            for w in ("one", "two", "three", "he", "she", "they", "year", "city")
        )
    )
    out = tmp_path / "retriever"
    args = ["--task", "retrieval", "-m", str(tiny_checkpoint_run), "--train-file", str(tmp_path / "pairs.jsonl")]
    args += ["-o", str(out), "--embedding-pooling", pooling, "--batch-size", "4", "--lr", "1e-3", "--no-progress"]
    result = CliRunner().invoke(finetune, args)
    assert result.exit_code == 0, result.output
    assert "2 steps on 8 pairs" in result.output  # hard negatives read, batches of 4
    record = json.loads((out / "retrieval_train.json").read_text())
    assert record["settings"]["pooling"] == pooling and record["settings"]["learning_rate"] == 1e-3
    theirs = SentenceTransformer(str(out), device="cpu").encode(TEXTS)
    ours = RetrievalEncoder(str(out), device="cpu").encode(TEXTS)
    assert _cosines(theirs, ours).min() >= 0.9999
    (tmp_path / "in.txt").write_text("\n".join(TEXTS[:2]) + "\n")
    features = tmp_path / "f.arrow"
    extract_features(
        FeatureConfig(
            model=str(out), input_file=str(tmp_path / "in.txt"), output_file=str(features), layers=(-1,),
            pooling="cls" if pooling == "cls" else "mean-sentence", progress=False, device="cpu",
        )
    )  # fmt: skip
    vectors = np.asarray(read_features(str(features)).column("layer_-1").to_pylist(), dtype=np.float32)
    assert _cosines(vectors, theirs[:2]).min() >= 0.9999


def test_finetune_retrieval_refuses_options_of_other_tasks(tmp_path, tiny_checkpoint_run):
    beir = write_beir(tmp_path / "beir")
    args = ["--task", "retrieval", "-m", str(tiny_checkpoint_run), "--train-file", str(beir), "-o", str(tmp_path / "o")]
    result = CliRunner().invoke(finetune, [*args, "--doc-stride", "64"])
    assert result.exit_code == 2 and "--doc-stride does not apply to --task retrieval" in result.output
    result = CliRunner().invoke(finetune, ["--task", "glue", "--train-file", str(beir), "-o", str(tmp_path / "g")])
    assert result.exit_code == 2 and "is a folder" in result.output


# ------------------------------------------------------------------------------------------ the evaluation


def _config(model: Path, beir: Path, out: Path, **overrides) -> RetrievalEvalConfig:
    return RetrievalEvalConfig(
        model=str(model), data_dir=str(beir), output_dir=str(out), progress=False, device="cpu", **overrides
    )


def test_stopped_evaluation_continues_to_the_same_table(tmp_path, tiny_checkpoint_run, monkeypatch, one_torch_thread):
    beir = write_beir(tmp_path / "beir", documents=8)
    whole = evaluate_retrieval(_config(tiny_checkpoint_run, beir, tmp_path / "whole"))
    monkeypatch.setattr(retrieval_evaluate, "ENCODE_BLOCK", 3)
    calls = {"n": 0}
    original = RetrievalEncoder.encode

    def interrupted(self, texts, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # Ctrl-C during the corpus's second block
        return original(self, texts, **kwargs)

    monkeypatch.setattr(RetrievalEncoder, "encode", interrupted)
    with pytest.raises(KeyboardInterrupt):
        evaluate_retrieval(_config(tiny_checkpoint_run, beir, tmp_path / "stopped"))
    run_dir = tmp_path / "stopped" / "runs" / "as-is"
    assert json.loads((run_dir / "corpus.progress.json").read_text()) == {"rows": 3}
    assert not (tmp_path / "stopped" / "retrieval.json").exists()
    again = evaluate_retrieval(_config(tiny_checkpoint_run, beir, tmp_path / "stopped"))
    assert calls["n"] == 2 + 2 + 1  # two corpus blocks left, then the queries
    assert render_table([again]) == render_table([whole]) and again["runs"][0]["metrics"] == whole["runs"][0]["metrics"]
    ids = {line.split()[0] for line in (run_dir / "run.trec").read_text().splitlines()}
    assert ids == {"q4", "q5", "q6", "q7"}  # the test split's queries, every document retrieved
    with pytest.raises(ValueError, match="made with other settings"):
        evaluate_retrieval(_config(tiny_checkpoint_run, beir, tmp_path / "stopped", split="train"))


def test_evaluation_fine_tunes_per_seed_and_is_a_table_row(tmp_path, tiny_checkpoint_run, one_torch_thread):
    beir = write_beir(tmp_path / "beir")
    out = tmp_path / "eval"
    summary = evaluate_retrieval(
        _config(tiny_checkpoint_run, beir, out, finetune=True, seeds=2, batch_size=2, learning_rate=1e-3)
    )
    assert [r["seed"] for r in summary["runs"]] == [12345, 12346]
    assert all((out / "runs" / f"seed{s}" / "model" / "modules.json").is_file() for s in (12345, 12346))
    assert summary["label"] == "run (fine-tuned)" and (out / "retrieval.md").read_text().startswith("| Model |")
    (tmp_path / "glue").mkdir()
    glue_row = {"label": "run", "columns": [{"name": "SST-2 Acc", "task": "sst2", "values": [80.0],
                "spread": [0.0], "in_average": True}], "average": 80.0, "seeds": [1], "note": ""}  # fmt: skip
    (tmp_path / "glue" / "glue.json").write_text(json.dumps(glue_row))
    shutil.copy(out / "retrieval.json", tmp_path / "glue" / "retrieval.json")
    rows = load_rows([str(tmp_path / "glue"), str(out)])
    table = render_table(rows)
    assert "SST-2 Acc" in table and "beir nDCG@10/MRR@10/R@100" in table and len(table.splitlines()) == 4


@pytest.mark.slow  # 7 s alone on 2 busy cores, most of it the first import of sentence-transformers
def test_modernbert_checkpoint_trains_a_retriever_bertprep_encodes_alike(tmp_path, one_torch_thread):
    from sentence_transformers import SentenceTransformer

    from bertprep.bert_model.retrieval.train import RetrievalTrainConfig, train_bi_encoder
    from finetune_factory import write_tiny_modernbert_checkpoint

    run = write_tiny_modernbert_checkpoint(tmp_path / "pre")  # a bertprep run: exported, then trained
    config = RetrievalTrainConfig(
        train_file=str(write_beir(tmp_path / "beir")), output_dir=str(tmp_path / "out"), init_from=run,
        batch_size=2, progress=False, device="cpu",
    )  # fmt: skip
    result = train_bi_encoder(config)
    assert (result.pairs, result.steps) == (4, 2)
    theirs = SentenceTransformer(str(tmp_path / "out"), device="cpu").encode(TEXTS)
    ours = RetrievalEncoder(str(tmp_path / "out"), device="cpu").encode(TEXTS)
    assert _cosines(theirs, ours).min() >= 0.9999
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bertprep-")]  # no staging left


def test_finetune_retrieval_trains_a_roberta_that_bertprep_encodes_alike(tmp_path, one_torch_thread):
    from sentence_transformers import SentenceTransformer

    from model_factory import write_tiny_roberta

    roberta = write_tiny_roberta(tmp_path / "roberta")  # 64 positions after its offset of 2; one token type
    out = tmp_path / "retriever"
    args = ["--task", "retrieval", "-m", str(roberta), "--train-file", str(write_beir(tmp_path / "beir"))]
    result = CliRunner().invoke(finetune, [*args, "-o", str(out), "--batch-size", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "2 steps on 4 pairs" in result.output
    assert json.loads((out / "config.json").read_text())["model_type"] == "roberta"
    theirs = SentenceTransformer(str(out), device="cpu")
    assert theirs.max_seq_length == 64  # RoBERTa's positions less its offset: TEXTS[3] is longer and is cut
    ours = RetrievalEncoder(str(out), device="cpu")
    assert (ours.pooling, ours.max_seq_length) == ("mean", 64)
    assert _cosines(theirs.encode(TEXTS), ours.encode(TEXTS)).min() >= 0.9999


def test_the_command_runs_holding_its_folder_and_refuses_a_second_writer(
    tmp_path, tiny_checkpoint_run, one_torch_thread
):
    from bertprep.cli.main import cli
    from bertprep.core import atomic

    beir = write_beir(tmp_path / "beir", documents=8)
    out = tmp_path / "eval"
    args = ["evaluate", "retrieval", "-m", str(tiny_checkpoint_run), "--data", str(beir), "-o", str(out),
            "--device", "cpu", "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(cli, args)  # the command's lock and the library's must not refuse each other
    assert result.exit_code == 0, result.output
    assert (out / "retrieval.json").is_file() and not (out / atomic.LOCK_NAME).exists()
    with atomic.directory_lock(str(tmp_path / "busy"), command="evaluate retrieval"):  # a first run, still running
        busy = CliRunner().invoke(cli, [*args[:7], str(tmp_path / "busy"), *args[8:]])
    assert busy.exit_code == 1 and "is being written by another evaluate retrieval run" in busy.output, busy.output


def _evaluate_command(model: Path, beir: Path, out: Path, *extra: str):
    from bertprep.cli.main import cli

    args = ["evaluate", "retrieval", "-m", str(model), "--data", str(beir), "-o", str(out), "--device", "cpu"]
    return CliRunner().invoke(cli, [*args, "--no-progress", *extra])


def test_a_finished_evaluation_refuses_other_settings_in_one_line_and_repeats_its_table(
    tmp_path, tiny_checkpoint_run, one_torch_thread
):
    from cli_factory import one_line

    beir, out = write_beir(tmp_path / "beir"), tmp_path / "eval"
    first = _evaluate_command(tiny_checkpoint_run, beir, out)
    assert first.exit_code == 0, first.output
    refused = _evaluate_command(tiny_checkpoint_run, beir, out, "--embedding-pooling", "cls")
    assert refused.exit_code == 1 and refused.output == one_line(refused.output) + "\n"
    assert f"{out} holds an evaluation made with other settings (pooling: None there, 'cls' now;" in refused.output
    assert f"{out / retrieval_evaluate.PLAN_FILE}, 1 finished run(s))" in refused.output
    again = _evaluate_command(tiny_checkpoint_run, beir, out)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout and again.stdout.startswith("| Model |")  # the table and its note


def test_a_folder_without_a_finished_run_takes_new_settings_and_drops_the_old_vectors(
    tmp_path, tiny_checkpoint_run, monkeypatch, one_torch_thread
):
    beir = write_beir(tmp_path / "beir", documents=8)
    monkeypatch.setattr(retrieval_evaluate, "ENCODE_BLOCK", 3)
    fresh = evaluate_retrieval(_config(tiny_checkpoint_run, beir, tmp_path / "fresh", pooling="cls"))
    original = RetrievalEncoder.encode

    def interrupted(self, texts, **kwargs):
        if interrupted.calls == 1:
            raise KeyboardInterrupt  # Ctrl-C during the corpus's second block
        interrupted.calls += 1
        return original(self, texts, **kwargs)

    interrupted.calls = 0
    monkeypatch.setattr(RetrievalEncoder, "encode", interrupted)
    with pytest.raises(KeyboardInterrupt):  # a first command, mean pooling, stopped with 3 documents encoded
        evaluate_retrieval(_config(tiny_checkpoint_run, beir, tmp_path / "out"))
    assert (tmp_path / "out" / "runs" / "as-is" / "corpus.progress.json").is_file()
    monkeypatch.setattr(RetrievalEncoder, "encode", original)
    lines: list[str] = []
    again = evaluate_retrieval(_config(tiny_checkpoint_run, beir, tmp_path / "out", pooling="cls"), report=lines.append)
    plan = tmp_path / "out" / retrieval_evaluate.PLAN_FILE
    assert lines[0] == (
        f"{plan}: no run of the settings it records finished (pooling); it takes this command's (the unfinished "
        "runs' files are removed)"
    )
    assert json.loads(plan.read_text())["pooling"] == "cls"
    assert again["runs"][0]["metrics"] == fresh["runs"][0]["metrics"]  # no mean-pooled vector kept
    assert np.array_equal(
        np.load(tmp_path / "out" / "runs" / "as-is" / "corpus.npy"),
        np.load(tmp_path / "fresh" / "runs" / "as-is" / "corpus.npy"),
    )


@pytest.mark.slow  # ~8 s on 2 busy cores, most of it the first import of sentence-transformers
def test_a_modernbert_step_directory_trains_a_retriever_as_its_run_does(tmp_path, one_torch_thread):
    """A checkpoint's step-* folder holds config.json and model.safetensors as a Hugging Face folder does, but no
    tokenizer files: it must be exported like its run directory, not loaded as it is (AutoTokenizer cannot read
    a ModernBERT folder with only vocab.txt)."""
    from bertprep.bert_model.retrieval.train import RetrievalTrainConfig, train_bi_encoder
    from finetune_factory import write_tiny_modernbert_checkpoint

    run = write_tiny_modernbert_checkpoint(tmp_path / "pre")
    step = str(Path(run) / "checkpoints" / "step-000001")
    assert (Path(step) / "config.json").is_file() and (Path(step) / "model.safetensors").is_file()
    beir = write_beir(tmp_path / "beir")
    vectors = []
    for name, init_from in (("from-run", run), ("from-step", step)):
        config = RetrievalTrainConfig(
            train_file=str(beir), output_dir=str(tmp_path / name), init_from=init_from, batch_size=2,
            progress=False, device="cpu",
        )  # fmt: skip
        assert train_bi_encoder(config).steps == 2
        vectors.append(RetrievalEncoder(str(tmp_path / name), device="cpu").encode(TEXTS))
    assert _cosines(vectors[0], vectors[1]).min() >= 0.9999
