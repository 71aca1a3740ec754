"""bert_model/hf/interop.py and `bertprep export`: parity with transformers, round trips, safe loading."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.hf.export import write_hf_directory
from bertprep.bert_model.hf.interop import build_model, load_model_source, read_hf_state_dict
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.models.heads import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertprep.bert_model.optim import create_optimizer
from bertprep.bert_model.tasks.glue import GlueExample, GlueTask
from bertprep.cli.main import cli
from bertprep.core.vocab_files import WordPieceTokenizer, read_vocab_file
from conftest import FIXTURES, need_module
from model_factory import tiny_bert

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()

VOCAB = FIXTURES / "finetune" / "vocab.txt"
TOKENS = read_vocab_file(str(VOCAB))
TINY = tiny_bert(vocab_size=len(TOKENS))


def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B, T = 3, 14
    lengths = torch.tensor([14, 9, 5])
    attention_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    input_ids = torch.randint(5, len(TOKENS), (B, T), generator=g) * attention_mask
    token_type_ids = ((torch.arange(T)[None, :] >= (lengths // 2)[:, None]) & attention_mask.bool()).long()
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def _ours(architecture: str, config: BertConfig):
    return {
        "BertForPreTraining": lambda: BertForPreTraining(config),
        "BertForSequenceClassification": lambda: BertForSequenceClassification(config, 3),
        "BertForQuestionAnswering": lambda: BertForQuestionAnswering(config),
        "BertForTokenClassification": lambda: BertForTokenClassification(config, 5),
    }[architecture]()


ARCHITECTURES = [
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertForQuestionAnswering",
    "BertForTokenClassification",
]
OUTPUTS = {
    "BertForPreTraining": ("prediction_logits", "seq_relationship_logits"),
    "BertForSequenceClassification": ("logits",),
    "BertForQuestionAnswering": ("start_logits", "end_logits"),
    "BertForTokenClassification": ("logits",),
}


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_exported_model_gives_the_same_logits_in_transformers(tmp_path, architecture):
    torch.manual_seed(0)
    model = _ours(architecture, BertConfig(**TINY)).eval()
    with torch.no_grad():  # non-zero biases, so a dropped or misnamed tensor cannot go unnoticed
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.02)
    id2label = {i: f"tag{i}" for i in range(model.num_labels)} if architecture != "BertForPreTraining" else None
    out_dir = write_hf_directory(
        str(tmp_path / "hf"), model, vocab_tokens=TOKENS, do_lower_case=True, id2label=id2label
    )
    assert sorted(os.listdir(out_dir)) == [
        "config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    hf = getattr(transformers, architecture).from_pretrained(out_dir).eval()
    batch = _inputs()
    with torch.no_grad():
        ours, theirs = model(**batch), hf(**batch)
    real = batch["attention_mask"].bool()
    for name in OUTPUTS[architecture]:
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a.shape == b.shape, name
        if a.dim() >= 2 and a.shape[1] == real.shape[1]:
            a, b = a[real], b[real]  # per-token scores: padding positions are not defined outputs
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0, msg=name)
    config = json.loads((Path(out_dir) / "config.json").read_text())
    assert config["architectures"] == [architecture]
    if id2label:
        assert hf.config.id2label == id2label


def test_regression_head_exports_problem_type(tmp_path):
    model = BertForSequenceClassification(BertConfig(**TINY), 1)
    out_dir = write_hf_directory(
        str(tmp_path / "hf"), model, vocab_tokens=TOKENS, do_lower_case=True, id2label={0: "score"}
    )
    hf = transformers.BertForSequenceClassification.from_pretrained(out_dir)
    assert hf.config.problem_type == "regression" and hf.config.num_labels == 1


def _hf_model(architecture: str):
    kwargs = dict(TINY)
    if architecture == "BertForSequenceClassification":
        kwargs["num_labels"] = 3
    if architecture == "BertForTokenClassification":
        kwargs["num_labels"] = 5
    torch.manual_seed(3)
    return getattr(transformers, architecture)(transformers.BertConfig(**kwargs))


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_round_trip_hf_bertprep_hf_is_the_identity(tmp_path, architecture):
    hf_dir = tmp_path / "from_hf"
    _hf_model(architecture).save_pretrained(hf_dir)
    shutil.copy(VOCAB, hf_dir / "vocab.txt")
    source = load_model_source(str(hf_dir))
    assert source.kind == "huggingface" and source.architecture == architecture
    model = build_model(source)
    out_dir = write_hf_directory(
        str(tmp_path / "back"), model, vocab_tokens=source.vocab_tokens, do_lower_case=True, id2label=source.id2label
    )
    before = load_file(str(hf_dir / "model.safetensors"))
    after = load_file(os.path.join(out_dir, "model.safetensors"))
    assert sorted(before) == sorted(after)
    for key in before:
        assert before[key].dtype == after[key].dtype and torch.equal(before[key], after[key]), key
    if source.id2label:
        assert json.loads((Path(out_dir) / "config.json").read_text())["id2label"] == {
            str(k): v for k, v in source.id2label.items()
        }


def test_pytorch_model_bin_and_old_key_spellings_load(tmp_path):
    hf = _hf_model("BertForSequenceClassification")
    state = hf.state_dict()
    old = {}
    for key, value in state.items():  # a TF-converted checkpoint: gamma/beta and a persisted position_ids
        key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        old[key] = value
    old["bert.embeddings.position_ids"] = torch.arange(64)[None]
    model_dir = tmp_path / "old"
    model_dir.mkdir()
    torch.save(old, model_dir / "pytorch_model.bin")
    hf.config.save_pretrained(model_dir)  # no "architectures" entry: inferred from the weights
    assert (
        "architectures" not in json.loads((model_dir / "config.json").read_text())
        or not json.loads((model_dir / "config.json").read_text())["architectures"]
    )
    shutil.copy(VOCAB, model_dir / "vocab.txt")
    loaded = read_hf_state_dict(str(model_dir))
    assert sorted(loaded) == sorted(state)
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    model = build_model(load_model_source(str(model_dir))).eval()
    batch = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, hf.eval()(**batch).logits, atol=1e-5, rtol=0)


def test_pickled_objects_in_pytorch_model_bin_are_refused(tmp_path):
    model_dir = tmp_path / "evil"
    model_dir.mkdir()
    torch.save({"weights": torch.zeros(1), "payload": Path("/tmp")}, model_dir / "pytorch_model.bin")
    (model_dir / "config.json").write_text(json.dumps(transformers.BertConfig(**TINY).to_dict()))
    with pytest.raises(
        Exception, match=r"holds objects other than weights, whose loading would run code \(nothing was run\)"
    ):
        read_hf_state_dict(str(model_dir))


def test_exported_tokenizer_matches_the_fine_tuning_features(tmp_path):
    model = BertForSequenceClassification(BertConfig(**TINY), 2)
    out_dir = write_hf_directory(str(tmp_path / "hf"), model, vocab_tokens=TOKENS, do_lower_case=True)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out_dir)
    ours = WordPieceTokenizer.from_tokens(TOKENS, do_lower_case=True)
    task = GlueTask(text_a_column=0, text_b_column=1, label_column=2, header=False, labels=["0", "1"])
    pairs = [("The Cats ran, running!", "He said: Paris is the capital."), ("Crème brûlée?", "dogs (blue) 1895-1943")]
    features = task.featurize(
        [GlueExample(a, b, None, 1, i) for i, (a, b) in enumerate(pairs)], ours, with_labels=False
    )
    for (a, b), feature in zip(pairs, features, strict=True):
        encoded = hf_tokenizer(a, b)
        assert encoded["input_ids"] == feature["input_ids"]
        assert encoded["token_type_ids"] == feature["token_type_ids"]


def _pretraining_checkpoint(run_dir: Path) -> str:
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY))
    optimizer = create_optimizer(model)
    state = {"model_config": model.config.to_dict(), "data": {"vocab_sha256": "x", "shards": str(run_dir / "none")}}
    return ckpt.save_checkpoint(
        str(run_dir),
        7,
        model=model,
        optimizer=optimizer,
        state=state,
        hf_config=model.config.to_hf_dict(),
        vocab_file=str(VOCAB),
    )


def test_export_command_writes_a_pretraining_model(tmp_path):
    path = _pretraining_checkpoint(tmp_path / "run")
    runner = CliRunner()
    result = runner.invoke(cli, ["export", str(tmp_path / "run"), "-o", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    assert "BertForPreTraining" in result.output
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path / "hf").eval()
    ours = BertForPreTraining(BertConfig(**TINY))
    ckpt.load_model_weights(path, ours)
    batch = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            ours.eval()(**batch).seq_relationship_logits, hf(**batch).seq_relationship_logits, atol=1e-5, rtol=0
        )
    # No silent overwrite; --overwrite replaces.
    again = runner.invoke(cli, ["export", str(tmp_path / "run"), "-o", str(tmp_path / "hf")])
    assert again.exit_code != 0 and "not empty" in again.output
    assert (
        runner.invoke(cli, ["export", str(tmp_path / "run"), "-o", str(tmp_path / "hf"), "--overwrite"]).exit_code == 0
    )
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]


def test_export_model_is_a_library_call_with_the_tokenizer_files_of_build_vocab(tmp_path):
    from bertprep.bert_model.hf.export import ExportError, export_model
    from bertprep.core.vocab_files import tokenizer_files

    _pretraining_checkpoint(tmp_path / "run")
    result = export_model(str(tmp_path / "run"), str(tmp_path / "hf"), do_lower_case=True)
    assert result.path == str(tmp_path / "hf") and result.source.architecture == "BertForPreTraining"
    expected = tokenizer_files(TOKENS, True, model_max_length=result.model.config.max_position_embeddings)
    for name, text in expected.items():  # byte for byte what build-vocab writes for this vocab
        assert (tmp_path / "hf" / name).read_text(encoding="utf-8") == text, name
    with pytest.raises(ExportError, match="is \\(or holds\\) the model directory") as err:
        export_model(str(tmp_path / "run"), str(tmp_path), overwrite=True)
    assert err.value.option == "--output-dir"


def test_export_command_explains_a_directory_without_a_model(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "empty"), "-o", str(tmp_path / "hf")])
    assert result.exit_code != 0
    assert "neither a bertprep checkpoint" in result.output and "config.json" in result.output
    assert not (tmp_path / "hf").exists()


def test_a_vocab_longer_than_the_model_is_refused(tmp_path):
    model = BertForSequenceClassification(BertConfig(**TINY), 2)
    with pytest.raises(ValueError, match="vocab_size"):
        write_hf_directory(str(tmp_path / "hf"), model, vocab_tokens=[*TOKENS, "extra"], do_lower_case=True)
    assert not (tmp_path / "hf").exists()


def test_a_model_with_more_rows_than_its_vocab_exports_them(tmp_path):
    """A padded embedding matrix (MosaicBERT's 30,528 rows for 30,522 WordPieces): config.json keeps the model's
    vocab_size, vocab.txt the tokenizer's entries, and transformers loads it."""
    model = BertForPreTraining(BertConfig(**{**TINY, "vocab_size": len(TOKENS) + 3}))
    write_hf_directory(str(tmp_path / "hf"), model, vocab_tokens=TOKENS, do_lower_case=True)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["vocab_size"] == len(TOKENS) + 3
    assert read_vocab_file(str(tmp_path / "hf" / "vocab.txt")) == TOKENS
    assert transformers.BertForPreTraining.from_pretrained(str(tmp_path / "hf")).config.vocab_size == len(TOKENS) + 3


@pytest.mark.parametrize("fail", [False, True])
def test_export_overwrite_replaces_only_what_export_writes(tmp_path, monkeypatch, fail):
    """Before round two `export --overwrite` swapped the whole directory, deleting the user's own files in it.
    Now the export files are replaced (a stale finetune.json removed) and every other file stays; a failure
    before the new files are complete leaves the old export whole."""
    _pretraining_checkpoint(tmp_path / "run")
    hf = tmp_path / "hf"
    runner = CliRunner()
    assert runner.invoke(cli, ["export", str(tmp_path / "run"), "-o", str(hf)]).exit_code == 0
    (hf / "README.md").write_text("my model card")
    (hf / "eval").mkdir()
    (hf / "eval" / "scores.txt").write_text("0.9")
    (hf / "finetune.json").write_text("{}")  # an export file of an earlier export (of a fine-tuned model)
    before = {p.name: p.read_bytes() for p in hf.iterdir() if p.is_file()}
    if fail:
        import bertprep.bert_model.hf.export as export_lib

        def no_space(path, text):
            raise OSError(28, "No space left on device", path)

        monkeypatch.setattr(export_lib, "write_text_synced", no_space)
    result = runner.invoke(cli, ["export", str(tmp_path / "run"), "-o", str(hf), "--overwrite"])
    after = {p.name: p.read_bytes() for p in hf.iterdir() if p.is_file()}
    assert (hf / "eval" / "scores.txt").read_text() == "0.9" and after["README.md"] == b"my model card"
    if fail:
        assert result.exit_code == 1 and "No space left on device" in result.output
        assert after == before
    else:
        assert result.exit_code == 0, result.output
        assert "finetune.json" not in after and after["model.safetensors"] == before["model.safetensors"]
        transformers.BertForPreTraining.from_pretrained(hf)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]  # no staging or .old folder left


def test_pickled_objects_are_refused_after_a_library_widened_torchs_allowlist(tmp_path):
    """Megatron-LM's import adds PosixPath and others to torch's weights-only allowlist for the whole process
    (as megatron.core does; here its call, without the import): bertprep still loads weights with torch's own
    list, and leaves the process's list as it found it."""
    from pathlib import PosixPath

    model_dir = tmp_path / "evil"
    model_dir.mkdir()
    torch.save({"weights": torch.zeros(1), "payload": Path("/tmp")}, model_dir / "pytorch_model.bin")
    (model_dir / "config.json").write_text(json.dumps(transformers.BertConfig(**TINY).to_dict()))
    before = torch.serialization.get_safe_globals()
    torch.serialization.add_safe_globals([PosixPath])
    try:
        with pytest.raises(ValueError, match=r"holds objects other than weights"):
            read_hf_state_dict(str(model_dir))
        assert PosixPath in torch.serialization.get_safe_globals()  # the process's list is kept
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(before)
