"""SentenceEncoder: the pure-ASCII shortcut must give exactly the ids of the full tokenizers pipeline."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from bertprep.pipeline.text.tokenization import _ASCII_PRE_TOKENS, SentenceEncoder, load_vocab

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DEMO_CORPUS = Path(__file__).resolve().parents[3] / "pipeline" / "demo_corpus"


def _full_pipeline_ids(encoder: SentenceEncoder, sentences: list[str]) -> list[list[int]]:
    return [e.ids for e in encoder.tokenizer.encode_batch_fast(sentences, add_special_tokens=False)]


def _random_ascii(rng: random.Random, n: int) -> list[str]:
    # every ASCII code point, control characters (\x00, \x0b, \x0c, \x7f, ...) and punctuation included
    return ["".join(chr(rng.randrange(0, 128)) for _ in range(rng.randrange(0, 80))) for _ in range(n)]


@pytest.mark.parametrize("do_lower_case", [True, False])
@pytest.mark.slow  # ~3 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_ascii_shortcut_equals_full_pipeline_on_fixture_vocab(do_lower_case):
    encoder = SentenceEncoder(load_vocab(str(FIXTURES / "pipeline" / "vocab.txt")), do_lower_case)
    lines = [
        line
        for path in sorted(DEMO_CORPUS.glob("*.txt"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    rng = random.Random(7)
    sentences = (
        lines
        + _random_ascii(rng, 3000)
        + [
            "Caf\u00e9 au lait, na\u00efve r\u00e9sum\u00e9.",  # accents: the full pipeline
            "\u4e2d\u6587 and ASCII",  # CJK: the full pipeline
            "tab\there\r\nand\x0bvertical\x0cfeed\x00nul\x7fdel",  # ASCII controls: the shortcut
            "",
            "   ",
        ]
    )
    assert any(not s.isascii() for s in sentences) and sum(s.isascii() for s in sentences) > 3000
    assert sentences != [] and encoder.encode(sentences) == _full_pipeline_ids(encoder, sentences)


def test_ascii_shortcut_normalization_matches_bert_normalizer():
    encoder = SentenceEncoder(load_vocab(str(FIXTURES / "pipeline" / "vocab.txt")), True)
    text = "A\tB\nC\rD\x0bE\x0cF\x00G\x1fH\x7fI J"
    assert encoder.normalize_ascii(text) == encoder.tokenizer.normalizer.normalize_str(text) == "a b c dEFGHI j".lower()


def test_mixed_batch_keeps_sentence_order():
    encoder = SentenceEncoder(load_vocab(str(FIXTURES / "pipeline" / "vocab.txt")), True)
    sentences = ["the cat", "caf\u00e9 the", "the", "\u00e9l\u00e8ve cat", "cat cat"]
    ids = encoder.encode(sentences)
    assert ids == _full_pipeline_ids(encoder, sentences)
    assert [len(x) for x in ids] == [len(x) for x in _full_pipeline_ids(encoder, sentences)]


@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_ascii_shortcut_on_google_vocabs(uncased_vocab, cased_vocab, shared_data):
    """On the real vocabs and real text (Wikipedia + Gutenberg excerpts), with both casings."""
    lines = []
    for path in sorted((shared_data / "wikipedia" / "wikiextractor-featured").rglob("wiki_0*"))[:2]:
        lines += [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines += _random_ascii(random.Random(11), 2000)
    assert len(lines) > 5000
    for vocab, lower in ((uncased_vocab, True), (cased_vocab, False)):
        encoder = SentenceEncoder(load_vocab(str(vocab)), lower)
        assert encoder.encode(lines) == _full_pipeline_ids(encoder, lines)


def test_encode_flat_is_encode_concatenated_with_lengths():
    encoder = SentenceEncoder(load_vocab(str(FIXTURES / "pipeline" / "vocab.txt")), True)
    sentences = ["the cat sat.", "", "caf\u00e9 the cat", "   ", "cat, cat; the!", "\u00e9l\u00e8ve"]
    ids, lengths = encoder.encode_flat(sentences)
    expected = _full_pipeline_ids(encoder, sentences)
    assert ids.dtype == np.uint32 and lengths.dtype == np.int64
    assert lengths.tolist() == [len(x) for x in expected] and lengths[1] == 0 and lengths[3] == 0
    assert ids.tolist() == [i for x in expected for i in x]
    empty_ids, empty_lengths = encoder.encode_flat([])
    assert len(empty_ids) == 0 and len(empty_lengths) == 0


def test_word_cache_overflow_and_break_character_give_the_same_ids():
    """A tiny cache is cleared again and again; a sentence holding the batch's own break character
    (\\x1e, a control character the normalizer removes) takes the sentence-by-sentence path."""
    vocab = load_vocab(str(FIXTURES / "pipeline" / "vocab.txt"))
    lines = [
        line
        for path in sorted(DEMO_CORPUS.glob("*.txt"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ][:3000]
    sentences = lines + ["the\x1ecat sat", "\x1e", "cat\x1e\x1ethe"]
    small = SentenceEncoder(vocab, True, cache_size=300)
    clears = []
    clear = small._clear_cache
    small._clear_cache = lambda: (clears.append(len(small._index)), clear())
    expected = _full_pipeline_ids(small, sentences)
    for start in range(0, len(sentences), 100):
        assert small.encode(sentences[start : start + 100]) == expected[start : start + 100]
    # cleared whenever the next batch would overflow it: it holds at most 300 words, or one batch's words
    batch_words = max(
        len({w for x in sentences[k : k + 100] for w in _ASCII_PRE_TOKENS.findall(x.lower())})
        for k in range(0, len(sentences), 100)
    )
    assert len(clears) >= 3 and max(clears) <= 1 + max(300, batch_words)
    assert small.encode(["the\x1ecat sat", "cat"]) == _full_pipeline_ids(small, ["the\x1ecat sat", "cat"])


def test_make_shards_text_settings_default_to_the_tokenizer_json_and_refuse_a_contradiction():
    from bertprep.pipeline.text.tokenization import Vocab, VocabError, resolve_text_settings

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(30)]
    no_strip = Vocab.from_tokens(tokens, do_lower_case=True, strip_accents=False, source="tokenizer.json")
    assert resolve_text_settings(no_strip, None, None) == (True, False, [])
    with pytest.raises(VocabError, match="built with strip_accents=False but --strip-accents was given"):
        resolve_text_settings(no_strip, None, True)
    plain = Vocab.from_tokens(tokens, source="vocab.txt")  # records nothing: the original's defaults
    do_lower_case, strip_accents, warnings = resolve_text_settings(plain, None, None)
    assert (do_lower_case, strip_accents, warnings) == (True, None, [])
    _, _, warnings = resolve_text_settings(plain, False, None)  # a vocab.txt's casing is a guess: a warning
    assert len(warnings) == 1 and "pass --do-lower-case" in warnings[0]
    cased = Vocab.from_tokens(tokens, do_lower_case=False, source="tokenizer.json")
    assert resolve_text_settings(cased, None, None)[0] is False  # the default follows the tokenizer.json
    assert resolve_text_settings(cased, False, None)[:2] == (False, None)
    with pytest.raises(VocabError) as err:  # a recorded casing contradicted: an error naming both and the fix
        resolve_text_settings(cased, True, None)
    assert str(err.value) == (
        "tokenizer.json: the tokenizer was built with lowercase=False but --do-lower-case was "
        "given; shards must be tokenized as their vocab was built: pass --no-do-lower-case (or "
        "leave it out), or build a vocab with `bertprep build-vocab --do-lower-case`"
    )
    assert err.value.option == "--do-lower-case"
    with pytest.raises(VocabError, match="built with lowercase=True but --no-do-lower-case was given") as err:
        resolve_text_settings(no_strip, False, None)
    assert err.value.option == "--no-do-lower-case"
