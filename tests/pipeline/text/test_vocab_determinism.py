"""build-vocab gives the same bytes in every process (pipeline/text/trainer_determinism.py, the workaround for
huggingface/tokenizers#1794), for WordPiece, byte-level BPE and Unigram, and the parts of the workaround do what
the trainer would do (the same words, the same alphabet, the ``##`` forms it creates).

Fixture: ``tests/fixtures/vocab/train.txt`` (four public-domain books, see the README there).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from tokenizers import normalizers, pre_tokenizers

from bertprep.pipeline.text.trainer_determinism import (
    canonical_unigram_vocab,
    count_words,
    fixed_alphabet,
    texts_of_counts,
)
from conftest import FIXTURES

TRAIN = FIXTURES / "vocab" / "train.txt"

#: (model, more options) of each build compared across the two processes.
CASES = [
    ("wordpiece", ()),
    ("bpe", ()),
    ("unigram", ()),
    ("wordpiece", ("--pad-to-multiple-of", "64")),
    ("bpe", ("--special-tokens", "bert", "--pad-to-multiple-of", "64")),
    ("unigram", ("--special-tokens", "bert", "--pad-to-multiple-of", "64")),
]

#: One process's builds: ``bertprep build-vocab`` once per argument list (a JSON list of them), one after the other.
_BUILDS = """
import json, sys
from bertprep.cli.main import cli
for args in json.loads(sys.argv[1]):
    cli.main(args, prog_name="bertprep", standalone_mode=False)
"""


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> list[list[dict[str, str]]]:
    """For each of :data:`CASES`, sha256 of every file ``bertprep build-vocab`` wrote in each of two processes run
    side by side (PYTHONHASHSEED 0 and 1) on the first 300 lines of the fixture. Each process builds all the cases
    in turn (one interpreter start-up per process, not per case: what differs between the processes, the hash seed
    and the trainer's hash maps, differs for every case alike)."""
    tmp_path = tmp_path_factory.mktemp("determinism")
    text = tmp_path / "train.txt"
    text.write_text("\n".join(TRAIN.read_text(encoding="utf-8").splitlines()[:300]) + "\n", encoding="utf-8")
    runs = []
    for seed in (0, 1):
        jobs = [
            ["build-vocab", str(text), "-o", str(tmp_path / f"{seed}-{i}"), "--vocab-size", "600"]
            + ["--model", model, "-q", *extra]
            for i, (model, extra) in enumerate(CASES)
        ]
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        command = [sys.executable, "-c", _BUILDS, json.dumps(jobs)]
        runs.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL))
    assert [run.wait(timeout=300) for run in runs] == [0, 0]
    return [
        [
            {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((tmp_path / f"{seed}-{i}").iterdir())}
            for seed in (0, 1)
        ]
        for i in range(len(CASES))
    ]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{m}-extra{i}" for i, (m, _) in enumerate(CASES)])
@pytest.mark.slow  # the two processes' builds: ~6 s on 2 busy cores (make test runs it; make test-fast does not)
def test_two_processes_write_byte_identical_files(builds, case):
    # (the trainer alone gives another vocab.txt in nearly every process on this text: its ## forms in hash order)
    model = CASES[case][0]
    first, second = builds[case]
    expected = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    assert set(first) == expected | ({"vocab.txt"} if model == "wordpiece" else set())
    assert first == second


TEXTS = [
    "The Man Who Was Thursday, said Syme.",
    "Café au lait, naïve résumé -- ÀÉÎ!",
    "中文分词 and 한국어 mixed\twith\x07 control chars",
    "don't stop: U.S.A. 2024-01-01",
]


@pytest.mark.parametrize("lowercase", [True, False])
def test_counted_words_are_the_trainers_words(lowercase):
    normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    expected = Counter(w for t in TEXTS for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(t)))
    fast = count_words(TEXTS * 3, normalizer, pre_tokenizer, bert_ascii_lowercase=lowercase)
    assert fast == Counter({w: 3 * n for w, n in expected.items()})
    assert count_words(TEXTS, normalizer, pre_tokenizer, bert_ascii_lowercase=None) == expected


def test_fed_texts_give_back_the_counts():
    counts = Counter({"the": 70_000, "syme": 3, "##x": 1})
    split = pre_tokenizers.WhitespaceSplit()
    fed = Counter(w for text in texts_of_counts(counts) for w, _ in split.pre_tokenize_str(text))
    assert fed == counts
    assert next(iter(texts_of_counts(counts))).startswith("##x ")  # sorted: the same order in every process


def test_fixed_alphabet_keeps_the_most_frequent_and_breaks_ties_by_code_point():
    counts = Counter({"ab": 3, "ba": 3, "c": 2, "d": 2, "xe": 1})
    alphabet, continuations, special = fixed_alphabet(counts, 4, "##")
    # a: 6, b: 6, then c, d, e, x tie at 2, 2, 1, 1: c and d are kept (the lower code points of the 2s)
    assert alphabet == ["a", "b", "c", "d"]
    # ## forms for kept characters that follow another one in a word: a (in ba), b (in ab); not c, d (alone)
    assert continuations == ["##a", "##b"]
    assert special == alphabet + continuations
    all_chars, _, _ = fixed_alphabet(counts, None, "##")
    assert all_chars == ["a", "b", "c", "d", "e", "x"]


def test_canonical_unigram_vocab_orders_the_pruned_characters_and_rounds():
    low = -13.5
    specials = [("<s>", 0.0), ("<pad>", 0.0)]
    # two runs of the trainer: the pruned characters q, j, H got the ladder's scores in another order, Z is scored
    # the lowest by the model itself, and scores differ in their last bits; x (3e-4 above, after a gap) is not
    # on the ladder
    run_a = specials + [("▁the", -3.000000000000001), ("q", low), ("j", low + 1e-4), ("H", low + 2e-4), ("ab", -9.5)]
    run_a += [("Z", low + 4e-11), ("x", low + 4e-4)]
    run_b = specials + [("▁the", -3.0), ("H", low), ("ab", -9.5), ("q", low + 1e-4), ("j", low + 2e-4)]
    run_b += [("Z", low), ("x", low + 4e-4 + 1e-15)]
    a, b = canonical_unigram_vocab(run_a, 2), canonical_unigram_vocab(run_b, 2)
    assert a == b
    assert a[:2] == specials
    assert a[2:] == [("▁the", -3.0), ("ab", -9.5), ("x", -13.4996), ("H", low), ("Z", low), ("j", low), ("q", low)]
