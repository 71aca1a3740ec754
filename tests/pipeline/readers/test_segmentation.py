"""Sentence segmenters: output contract, the hard cases behind the default, and option errors."""

from __future__ import annotations

import pytest

from bertprep.pipeline.readers.segmentation import DEFAULT_SEGMENTER, SEGMENTERS, get_segmenter, split_sentences

PARAGRAPH = (
    "  Mr. Smith went to Washington, D.C. on Jan. 5.   He paid $3.50 for coffee, e.g. a latte... "
    'Then J. R. R. Tolkien arrived. "Stop!" he said.  Nobody moved.  '
)


@pytest.mark.parametrize("name", SEGMENTERS)
def test_sentences_are_stripped_nonempty_and_keep_all_text(name):
    sentences = get_segmenter(name)(PARAGRAPH)
    assert len(sentences) >= 4
    assert all(s and s == s.strip() for s in sentences)
    # No character is lost or invented (modulo whitespace, which blingfire normalizes).
    assert "".join("".join(sentences).split()) == "".join(PARAGRAPH.split())


@pytest.mark.parametrize("name", SEGMENTERS)
@pytest.mark.parametrize("paragraph", ["", "   ", "\n\t "])
def test_blank_paragraph_gives_no_sentence(name, paragraph):
    assert get_segmenter(name)(paragraph) == []


def test_default_is_syntok_and_is_offered():
    assert DEFAULT_SEGMENTER == "syntok"
    assert DEFAULT_SEGMENTER in SEGMENTERS


@pytest.mark.parametrize(
    "paragraph, expected",
    [
        ("Mr. Smith went to Washington. He arrived late.", ["Mr. Smith went to Washington.", "He arrived late."]),
        (
            "Bring fruit, e.g. apples or pears. Do not bring nuts.",
            ["Bring fruit, e.g. apples or pears.", "Do not bring nuts."],
        ),
        ("The U.S. Army was founded in 1775. It is old.", ["The U.S. Army was founded in 1775.", "It is old."]),
        (
            "The price rose to 3.75 dollars. Sales fell by 2.5 percent.",
            ["The price rose to 3.75 dollars.", "Sales fell by 2.5 percent."],
        ),
        ('"Stop!" he said. Nobody moved.', ['"Stop!" he said.', "Nobody moved."]),
        ("He hesitated... Then he spoke.", ["He hesitated...", "Then he spoke."]),
        (
            "J. R. R. Tolkien wrote The Hobbit. It appeared in 1937.",
            ["J. R. R. Tolkien wrote The Hobbit.", "It appeared in 1937."],
        ),
    ],
)
def test_default_segmenter_on_hard_cases(paragraph, expected):
    assert split_sentences(paragraph) == expected


def test_syntok_returns_exact_substrings():
    # syntok's tokenizer rewrites "n't" to "not" in token values; the segmenter must return source text.
    paragraph = "Don't  go there.\tIt isn't safe — naïve visitors get lost. 力加勝北区 is fine!"
    sentences = get_segmenter("syntok")(paragraph)
    assert sentences == ["Don't  go there.", "It isn't safe — naïve visitors get lost.", "力加勝北区 is fine!"]
    assert all(s in paragraph for s in sentences)


def test_blingfire_splits_a_quoted_exclamation_which_is_why_it_is_not_the_default():
    assert get_segmenter("blingfire")('"Stop!" he said. Nobody moved.') != ['"Stop!" he said.', "Nobody moved."]


def test_unknown_segmenter_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown segmenter 'punkt'.*syntok.*blingfire.*--segmenter"):
        get_segmenter("punkt")
