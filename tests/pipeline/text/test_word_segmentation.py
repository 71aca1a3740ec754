"""Word boundaries (``pipeline/text/word_segmentation.py``): the default whitespace + punctuation rule, the plug-in
word segmenter (a small fake one documents the interface), and the built-in jieba / Kiwi wrappers."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from bertprep.pipeline.text.tokenization import SentenceEncoder, load_vocab
from bertprep.pipeline.text.word_segmentation import (
    WordSegmenterError,
    default_word_starts,
    instance_word_ids,
    load_word_segmenter,
    word_spans,
    word_starts,
    word_starts_from_offsets,
)
from conftest import need_module

#: A plug-in word segmenter as a user writes one: any importable ``str -> list[str]``, the words in order.
#: This one is a greedy longest-match over a tiny Chinese dictionary (what jieba does with a real one and
#: an HMM for unknown words); other characters are words of one character, spaces are left out.
FAKE_SEGMENTER = textwrap.dedent("""
    DICTIONARY = {"中国", "人民", "中华人民共和国", "宪法", "我们"}
    LONGEST = max(map(len, DICTIONARY))

    def words(text):
        out, i = [], 0
        while i < len(text):
            for n in range(min(LONGEST, len(text) - i), 0, -1):
                if n == 1 or text[i:i + n] in DICTIONARY:
                    if not text[i:i + n].isspace():
                        out.append(text[i:i + n])
                    i += n
                    break
        return out

    def not_substrings(text):
        return [w.upper() for w in text.split()]

    NOT_CALLABLE = 3
""")


@pytest.fixture
def fake_segmenter_module(tmp_path, monkeypatch):
    (tmp_path / "fake_words.py").write_text(FAKE_SEGMENTER, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "fake_words"


@pytest.fixture(scope="module")
def uncased(shared_data):
    vocab = load_vocab(str(shared_data / "vocab" / "bert-base-uncased-vocab.txt"))
    return vocab, SentenceEncoder(vocab, True)


def _grouped(vocab, ids, starts) -> str:
    """Pieces with `|` before each word start: '| the | un ##aff ##able | cat'."""
    return " ".join(("| " if s else "") + vocab.tokens[i] for i, s in zip(ids.tolist(), starts.tolist(), strict=True))


def test_default_words_are_whitespace_and_punctuation(uncased):
    """The default rule is BERT's pre-tokenizer: a word is a piece and its following ## pieces."""
    vocab, encoder = uncased
    ids, _ = encoder.encode_flat(["The unaffable cat's whiskers, twice-bitten."])
    starts = default_word_starts(ids, [t.startswith("##") for t in vocab.tokens])
    assert _grouped(vocab, ids, starts) == (
        "| the | una ##ffa ##ble | cat | ' | s | w ##his ##kers | , | twice | - | bitten | ."
    )


def test_plugin_segmenter_groups_pieces_into_its_words(uncased, fake_segmenter_module):
    vocab, encoder = uncased
    segmenter = load_word_segmenter(f"{fake_segmenter_module}:words")
    sentences = ["中华人民共和国宪法 我们 hello", "中国人民。"]
    ids, lengths = encoder.encode_flat(sentences)
    starts = word_starts(encoder.tokenizer, sentences, segmenter, lengths)
    assert len(starts) == len(ids)
    # each Chinese character is its own pre-token (and piece); the segmenter's words group them; 'hello'
    # and '。' are words of their own, and each sentence starts a word
    assert _grouped(vocab, ids, starts) == (
        "| 中 [UNK] 人 民 [UNK] 和 国 | [UNK] 法 | 我 [UNK] | hello | 中 国 | 人 民 | 。"
    )


def test_word_starts_from_hand_built_offsets():
    text = "ab cde"
    spans = word_spans(text, ["ab", " ", "cde"])
    assert spans == [(0, 2), (3, 6)]
    # pieces: 'a' 'b' (one word), 'cd' '##e' (one word)
    assert word_starts_from_offsets([(0, 1), (1, 2), (3, 5), (5, 6)], spans) == [True, False, True, False]
    # a piece in no word (the segmenter left 'x' out) is a word of its own, and so is the next piece
    assert word_starts_from_offsets([(0, 1), (2, 3), (3, 4)], [(0, 2), (3, 4)]) == [True, True, True]


def test_instance_word_ids_number_words_and_mark_specials():
    #           [CLS]  a   ##b  c  [SEP] ##d  e  [SEP]
    starts = np.array([0, 1, 0, 1, 0, 0, 1, 0])
    special = np.array([1, 0, 0, 0, 1, 0, 0, 1], dtype=bool)
    # a word never crosses [SEP]: B's leading '##d' starts a word
    assert instance_word_ids(starts, special).tolist() == [-1, 0, 0, 1, -1, 2, 3, -1]


def test_segmenter_errors_name_the_option(fake_segmenter_module, uncased):
    with pytest.raises(WordSegmenterError, match=r"--word-segmenter 'nocolon'.*module:callable"):
        load_word_segmenter("nocolon")
    with pytest.raises(WordSegmenterError, match="cannot import no_such_module_xyz"):
        load_word_segmenter("no_such_module_xyz:words")
    with pytest.raises(WordSegmenterError, match="has no missing"):
        load_word_segmenter(f"{fake_segmenter_module}:missing")
    with pytest.raises(WordSegmenterError, match="not callable"):
        load_word_segmenter(f"{fake_segmenter_module}:NOT_CALLABLE")
    segmenter = load_word_segmenter(f"{fake_segmenter_module}:not_substrings")
    _, encoder = uncased
    _ids, lengths = encoder.encode_flat(["hello world"])
    with pytest.raises(WordSegmenterError, match=r"'HELLO'.*substrings of its input"):
        word_starts(encoder.tokenizer, ["hello world"], segmenter, lengths)


def test_jieba_words_group_chinese_characters(uncased):
    need_module("jieba")
    vocab, encoder = uncased
    segmenter = load_word_segmenter("jieba")
    sentences = ["我们是中国人民。"]
    ids, lengths = encoder.encode_flat(sentences)
    starts = word_starts(encoder.tokenizer, sentences, segmenter, lengths)
    assert _grouped(vocab, ids, starts) == "| 我 [UNK] | [UNK] | 中 国 | 人 民 | 。"


@pytest.mark.slow  # ~5 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_kiwi_words_split_korean_stems_and_particles():
    need_module("kiwipiepy")
    segmenter = load_word_segmenter("kiwi")
    # 대한민국은 = 대한민국 (noun) + 은 (particle); 갔습니다 = 가 + 었 (one syllable, merged) + 습니다
    assert segmenter("대한민국은 학교에 갔습니다.") == ["대한민국", "은", "학교", "에", "갔", "습니다", "."]


def test_builtin_segmenter_without_its_package_names_it(monkeypatch):
    from bertprep.pipeline.text import word_segmentation

    monkeypatch.setitem(sys.modules, "jieba", None)  # as if not installed
    word_segmentation._jieba.cache_clear()
    try:
        with pytest.raises(WordSegmenterError, match="needs the jieba package: pip install jieba"):
            load_word_segmenter("jieba")
    finally:
        word_segmentation._jieba.cache_clear()
