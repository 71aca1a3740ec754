"""Any tokenizer.json (core/pretrained_tokenizer.py): special tokens read, never assumed; word marks; the
encoder of pre-training text; the model-input layouts, each against what transformers does with the same
directory."""

from __future__ import annotations

import json

import pytest

from bertprep.core.pretrained_tokenizer import BYTE_LEVEL_SPACE, PretrainedTokenizer, load_pretrained_tokenizer
from bertprep.core.vocab_files import VocabError
from conftest import need_module
from tokenizer_factory import modernbert_tokenizer_dir, roberta_tokenizer_dir, unigram_tokenizer_dir

transformers = need_module("transformers")
transformers.logging.set_verbosity_error()

TEXT = "The Man Who Was Thursday, said Syme."


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizers")
    return {
        "roberta": roberta_tokenizer_dir(root / "roberta"),
        "modernbert": modernbert_tokenizer_dir(root / "modernbert"),
        "unigram": unigram_tokenizer_dir(root / "unigram"),
    }


def test_special_tokens_come_from_the_files(dirs):
    roberta = load_pretrained_tokenizer(str(dirs["roberta"]))
    assert roberta.special_tokens == {
        "[PAD]": "<pad>",
        "[UNK]": "<unk>",
        "[CLS]": "<s>",
        "[SEP]": "</s>",
        "[MASK]": "<mask>",
    }
    assert roberta.special_token_ids() == {"[PAD]": 1, "[UNK]": 3, "[CLS]": 0, "[SEP]": 2, "[MASK]": 4}
    modern = load_pretrained_tokenizer(str(dirs["modernbert"] / "tokenizer.json"))
    ids = modern.special_token_ids()
    assert ids["[CLS]"] == modern.tokens.index("[CLS]") == len(modern.tokens) - 4  # added after the pieces
    assert modern.model_type == "BPE" and modern.mask_token == "[MASK]"


def test_without_config_files_the_tokenizer_json_names_them(dirs):
    text = (dirs["roberta"] / "tokenizer.json").read_text(encoding="utf-8")
    bare = PretrainedTokenizer.from_texts({"tokenizer.json": text}, source="bare")
    # [CLS]/[SEP] from the post-processor, [UNK] from the model (none here: byte-level), [MASK]/[PAD] by spelling
    assert bare.special_tokens == {"[PAD]": "<pad>", "[CLS]": "<s>", "[SEP]": "</s>", "[MASK]": "<mask>"}
    config = json.dumps({"mask_token": "<pad>", "cls_token": {"content": "</s>"}})
    renamed = PretrainedTokenizer.from_texts({"tokenizer.json": text, "tokenizer_config.json": config})
    assert renamed.special_tokens["[MASK]"] == "<pad>" and renamed.special_tokens["[CLS]"] == "</s>"
    spec = json.loads(text)
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] != "<mask>"]
    with pytest.raises(VocabError, match=r"no \[MASK\] token named .* add mask_token to the tokenizer_config.json"):
        PretrainedTokenizer.from_texts({"tokenizer.json": json.dumps(spec)}, source="no-mask")
    with pytest.raises(VocabError, match="its \\[MASK\\] token '<m>' is not in the vocab"):
        PretrainedTokenizer.from_texts({"tokenizer.json": text, "tokenizer_config.json": '{"mask_token": "<m>"}'})


def test_word_marks_give_the_word_boundaries(dirs):
    roberta = load_pretrained_tokenizer(str(dirs["roberta"]))
    cont = roberta.is_continuation()
    for i, token in enumerate(roberta.tokens):
        assert cont[i] == (not token.startswith(BYTE_LEVEL_SPACE) and i > 4)  # specials (0-4) start a word
    unigram = load_pretrained_tokenizer(str(dirs["unigram"]))
    assert [t for t, c in zip(unigram.tokens, unigram.is_continuation(), strict=True) if not c][5:8] == [
        t for t in unigram.tokens[5:] if t.startswith("\u2581")
    ][:3]


@pytest.mark.parametrize("name", ["roberta", "modernbert", "unigram"])
def test_sentences_read_as_inside_running_text_and_specials_are_text(dirs, name):
    tokenizer = load_pretrained_tokenizer(str(dirs[name]))
    hf = transformers.AutoTokenizer.from_pretrained(str(dirs[name]))
    [ids] = tokenizer.encode_sentences([TEXT])
    # the sentence as transformers encodes it after a space (byte-level) or as it is (Unigram prepends ▁)
    space = " " if name != "unigram" else ""
    assert ids == hf(space + TEXT, add_special_tokens=False)["input_ids"]
    assert tokenizer.is_continuation()[ids[0]] is False  # the first word starts a word
    [literal] = tokenizer.encode_sentences([f"a {tokenizer.mask_token} {tokenizer.special_tokens['[SEP]']}"])
    specials = {i for role, i in tokenizer.special_token_ids().items() if role != "[UNK]"}  # (< may be unknown)
    assert not specials & set(literal)  # written special tokens are their characters, as in the original BERT


@pytest.mark.parametrize("name", ["roberta", "modernbert", "unigram"])
def test_model_inputs_follow_the_tokenizers_template(dirs, name):
    tokenizer = load_pretrained_tokenizer(str(dirs[name]))
    hf = transformers.AutoTokenizer.from_pretrained(str(dirs[name]))
    a, b = tokenizer.encode_batch(["first part", "second part"])
    pair = hf("first part", "second part")
    assert tokenizer.build_inputs_with_special_tokens(a.ids, b.ids) == pair["input_ids"]
    assert tokenizer.build_inputs_with_special_tokens(a.ids) == hf("first part")["input_ids"]
    types = tokenizer.create_token_type_ids_from_sequences(a.ids, b.ids)
    assert types == tokenizer.full.encode("first part", "second part").type_ids  # (the file's own template)
    assert tokenizer.num_special_tokens_to_add(pair=True) == len(pair["input_ids"]) - len(a.ids) - len(b.ids)
    if name == "roberta":  # <s> A </s></s> B </s>, one token type
        assert tokenizer.num_special_tokens_to_add(pair=True) == 4 and set(types) == {0}


def test_one_loader_for_local_files_and_make_shards_file_systems(dirs, tmp_path):
    """make-shards' ``load_vocab`` (any Beam file system) and the model side (local files) load a tokenizer.json
    through the same ``load_pretrained_tokenizer`` and tell its model type with the same ``model_type_of``."""
    from bertprep.core.pretrained_tokenizer import model_type_of, tokenizer_json_model_type
    from bertprep.pipeline.text.tokenization import load_vocab

    local = load_pretrained_tokenizer(str(dirs["roberta"]))
    through_beam = load_vocab(str(dirs["roberta"])).pretrained
    assert through_beam.tokens == local.tokens and through_beam.special_tokens == local.special_tokens
    read = []

    def read_text(path):
        read.append(path)
        return (dirs["roberta"] / path.rsplit("/", 1)[-1]).read_text(encoding="utf-8")

    remote = load_pretrained_tokenizer("gs://bucket/roberta/tokenizer.json", read_text)
    assert remote.tokens == local.tokens and read[0] == "gs://bucket/roberta/tokenizer.json"
    assert all(path.startswith("gs://bucket/roberta/") for path in read)
    text = (dirs["unigram"] / "tokenizer.json").read_text(encoding="utf-8")
    assert model_type_of(text) == tokenizer_json_model_type(str(dirs["unigram"])) == "Unigram"
    assert model_type_of("not json") is None and tokenizer_json_model_type(str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        load_pretrained_tokenizer(str(tmp_path))


def test_a_tokenizer_json_saved_with_padding_and_truncation_neither_pads_nor_cuts(dirs, tmp_path):
    """transformers and sentence-transformers save tokenizer.json with the padding and truncation of their last
    call; bertprep pads and cuts itself, so a batch must hold each text's own pieces, all of them."""
    spec = json.loads((dirs["roberta"] / "tokenizer.json").read_text())
    plain = load_pretrained_tokenizer(str(dirs["roberta"]))
    spec["padding"] = {"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": None, "pad_id": 1,
                       "pad_type_id": 0, "pad_token": "<pad>"}  # fmt: skip
    spec["truncation"] = {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0}
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    saved = load_pretrained_tokenizer(str(tmp_path))
    texts = ["they", TEXT]
    expected = [e.ids for e in plain.encode_batch(texts)]
    assert len(expected[1]) > 4 and len(expected[0]) < len(expected[1])
    assert [e.ids for e in saved.encode_batch(texts)] == expected
    assert saved.full.encode(TEXT).ids == plain.full.encode(TEXT).ids
