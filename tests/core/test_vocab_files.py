"""The vocab/tokenizer contract (``core/vocab_files.py``): reading, the strict tokenizer, the files written."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from bertprep.core.vocab_files import (
    SPECIAL_TOKENS,
    VocabError,
    build_tokenizer,
    hf_tokenizer,
    parse_tokenizer_json,
    parse_vocab_txt,
    read_vocab_file,
    special_token_ids,
    tokenizer_files,
)

TOKENS = list(SPECIAL_TOKENS) + ["the", "cat", "sat", "[", "]", "sep", "a", "##a", "b", "##b", "ca", "##t", "é"]


def test_vocab_txt_is_read_as_the_original_and_duplicates_are_refused(tmp_path):
    assert parse_vocab_txt(" [PAD] \n[UNK]\n\nx\n", "v.txt") == ["[PAD]", "[UNK]", "", "x"]
    with pytest.raises(VocabError, match=r"^v\.txt:4: the token 'x' is already on line 2"):
        parse_vocab_txt("[PAD]\nx\ny\nx\n", "v.txt")
    with pytest.raises(VocabError, match=re.escape("v.txt: the vocab file is empty")):
        parse_vocab_txt("\n \n", "v.txt")
    path = tmp_path / "vocab.txt"
    path.write_text("[UNK]\n[CLS]\n", encoding="utf-8")
    with pytest.raises(VocabError, match=r"missing special token\(s\) \[PAD\], \[SEP\], \[MASK\]"):
        read_vocab_file(str(path))


def test_special_ids_are_looked_up_not_assumed():
    google_like = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    ids = special_token_ids({t: i for i, t in enumerate(google_like)})
    assert ids == {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}


def test_strict_tokenizer_splits_special_tokens_in_text_and_keeps_long_words():
    tok = build_tokenizer(TOKENS, do_lower_case=True)
    ids = tok.encode("The cat [SEP] sat", add_special_tokens=False).tokens
    assert ids == ["the", "cat", "[", "sep", "]", "sat"]
    long_word = "ab" * 75  # 150 characters: pieces under the original's 200-character limit, not [UNK]
    assert "[UNK]" not in tok.encode(long_word, add_special_tokens=False).tokens
    assert tok.encode("a" * 201, add_special_tokens=False).tokens == ["[UNK]"]


def test_hf_tokenizer_gives_the_strict_ids_plus_the_bert_template():
    strict, hf = build_tokenizer(TOKENS, True), hf_tokenizer(TOKENS, True)
    for text in ("the cat sat", "Cat ab ba", "é"):
        body = strict.encode(text, add_special_tokens=False).ids
        pair = hf.encode(text, "the cat")
        cls_id, sep_id = TOKENS.index("[CLS]"), TOKENS.index("[SEP]")
        second = strict.encode("the cat", add_special_tokens=False).ids
        assert pair.ids == [cls_id, *body, sep_id, *second, sep_id]
        assert pair.type_ids == [0] * (len(body) + 2) + [1] * (len(second) + 1)


@pytest.mark.parametrize("do_lower_case,strip_accents", [(True, None), (True, False), (False, None), (False, True)])
def test_tokenizer_files_agree_on_class_and_accent_stripping(do_lower_case, strip_accents):
    files = tokenizer_files(TOKENS, do_lower_case, strip_accents=strip_accents, model_max_length=128)
    assert list(files) == ["tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "vocab.txt"]
    config = json.loads(files["tokenizer_config.json"])
    tokens, lower, strip = parse_tokenizer_json(files["tokenizer.json"], "tokenizer.json")
    expected_strip = do_lower_case if strip_accents is None else strip_accents
    assert config["tokenizer_class"] == "BertTokenizerFast"
    assert (config["do_lower_case"], config["strip_accents"]) == (lower, strip) == (do_lower_case, expected_strip)
    assert config["model_max_length"] == 128
    assert tokens == TOKENS and files["vocab.txt"] == "".join(t + "\n" for t in TOKENS)


def test_contract_module_loads_neither_beam_nor_torch():
    code = (
        "import sys; import bertprep.core.vocab_files, bertprep.pipeline.masking.rule; "
        "print(sorted(m for m in ('apache_beam', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
