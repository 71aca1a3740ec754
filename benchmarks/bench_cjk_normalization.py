"""What lower-casing and accent stripping do to Korean and Chinese: the figures of the README section
"Korean, Chinese and other scripts".

For each setting it trains a WordPiece vocab with ``bertprep.pipeline.text.vocab.train_wordpiece`` (as
``bertprep build-vocab`` does) on real prose from the shared data (``cjk/ko``: the Constitution of the
Republic of Korea and the Korean Wikipedia article 한국어; ``cjk/zh``: the US Constitution in simplified
Chinese, the Wikipedia article 官话 and three Lu Xun stories; see ``cjk/README.md``), reads the text with
``--input-format text`` and the default segmenter, encodes it with make-shards' ``SentenceEncoder`` and
prints, per setting:

* ``syllables kept``: share of the Hangul syllables of the text that are still syllables after
  normalization (NFD splits each into 2-3 conjoining jamo);
* ``vocab``: entries holding a Hangul syllable / a conjoining jamo (Korean) or a CJK ideograph (Chinese);
* ``[UNK] in``: [UNK] share of the pieces on the text the vocab was trained on (what make-shards on the
  same text reports); ``[UNK] out``: on held-out text (Korean: vocab from the constitution, measured on
  the Wikipedia article; Chinese: vocab without the Lu Xun stories, measured on them: traditional
  characters, many of which the simplified training text lacks);
* ``pieces/word``: word pieces per word, a word being a pre-token of ``BertPreTokenizer`` (split on
  whitespace and punctuation; each CJK ideograph is a word of its own) of the original text, so the same
  words are counted for every setting; ``in`` on the training text, ``out`` on the held-out text;
  ``pieces/sent``: pieces per sentence of the training text (sequence length);
* ``warns``: whether build-vocab prints the accent-stripping warning for it.

Run (a few seconds on one core)::

    python benchmarks/bench_cjk_normalization.py [--data ../shared/data] [--vocab-size 3000]

The vocab trainer is not deterministic run to run (tie order), so the last digit of a figure may move.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from tokenizers import normalizers, pre_tokenizers

from bertprep.core.normalization import (
    accent_stripping_stats,
    hangul_vocab_counts,
    is_hangul_syllable,
    resolve_strip_accents,
)
from bertprep.pipeline.readers import read_documents
from bertprep.pipeline.text.tokenization import SentenceEncoder, Vocab
from bertprep.pipeline.text.vocab import VocabConfig, train_wordpiece

# (label, build-vocab flags, VocabConfig settings)
SETTINGS = [
    ("uncased (default)", "", dict(do_lower_case=True)),
    ("uncased, no accent stripping", "--no-strip-accents", dict(do_lower_case=True, strip_accents=False)),
    ("cased", "--cased", dict(do_lower_case=False)),
]


def _sentences(paths: list[Path]) -> list[str]:
    return [s for path in paths for doc in read_documents(str(path), input_format="text") for s in doc.sentences]


def _is_cjk(char: str) -> bool:
    return 0x4E00 <= ord(char) <= 0x9FFF or 0x3400 <= ord(char) <= 0x4DBF


def _measure(train: list[str], heldout: list[str], vocab_size: int, limit_alphabet: int | None, settings: dict) -> dict:
    config = VocabConfig(vocab_size=vocab_size, show_progress=False, limit_alphabet=limit_alphabet, **settings)
    trained = train_wordpiece(train, config)
    vocab = Vocab.from_tokens(trained.tokens)
    encoder = SentenceEncoder(vocab, config.do_lower_case, strip_accents=config.strip_accents)
    unk = vocab.token_to_id["[UNK]"]
    pre = pre_tokenizers.BertPreTokenizer()
    # words as BERT splits them whatever the setting: CJK ideographs isolated, no case or accent change
    split_cjk = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
    )

    def rates(sentences: list[str]) -> tuple[float, float, float]:
        ids = encoder.encode(sentences)
        pieces = sum(map(len, ids))
        words = sum(len(pre.pre_tokenize_str(split_cjk.normalize_str(s))) for s in sentences)
        unks = sum(i == unk for row in ids for i in row)
        return unks / pieces, pieces / words, pieces / len(sentences)

    unk_in, per_word, per_sentence = rates(train)
    unk_out, per_word_out, _ = rates(heldout)
    syllables_in = sum(is_hangul_syllable(c) for s in train for c in s)
    normalizer = encoder.tokenizer.normalizer
    syllables_out = sum(is_hangul_syllable(c) for s in train for c in normalizer.normalize_str(s))
    vocab_syllables, vocab_jamo = hangul_vocab_counts(trained.tokens)
    return {
        "syllables_kept": syllables_out / syllables_in if syllables_in else None,
        "vocab_syllables": vocab_syllables,
        "vocab_jamo": vocab_jamo,
        "vocab_cjk": sum(any(_is_cjk(c) for c in t) for t in trained.tokens),
        "size": trained.vocab_size,
        "unk_in": unk_in,
        "unk_out": unk_out,
        "per_word": per_word,
        "per_word_out": per_word_out,
        "per_sentence": per_sentence,
        "warning": trained.accent_warning() is not None,
        "strip": resolve_strip_accents(config.strip_accents, config.do_lower_case),
    }


def _rows(
    settings: list[tuple[str, str, dict, int | None]],
    all_text: list[str],
    train: list[str],
    heldout: list[str],
    vocab_size: int,
) -> list[tuple[str, str, dict]]:
    """One ``_table`` row per ``(label, flags, VocabConfig settings, limit_alphabet)``: the measures of a vocab
    trained on ``all_text``, with ``[UNK]`` out and pieces per word out from one trained on ``train`` alone."""
    rows = []
    for label, flags, config, limit in settings:
        r = _measure(all_text, heldout, vocab_size, limit, config)
        out = _measure(train, heldout, vocab_size, limit, config)
        r["unk_out"], r["per_word_out"] = out["unk_out"], out["per_word_out"]
        rows.append((label, flags, r))
    return rows


def _table(title: str, command: str, rows: list[tuple[str, str, dict]], korean: bool) -> None:
    print(f"\n{title}\n  {command}")
    vocab_head = "vocab syll/jamo" if korean else "vocab CJK"
    print(
        f"  {'setting':30} {'flags':38} {'syll. kept':>10} {vocab_head:>15} {'[UNK] in':>8} {'[UNK] out':>9} "
        f"{'pieces/word in':>14} {'out':>5} {'pieces/sent':>11} {'warns':>5}"
    )
    for label, flags, r in rows:
        kept = "-" if r["syllables_kept"] is None else f"{r['syllables_kept']:.1%}"
        vocab = f"{r['vocab_syllables']:,}/{r['vocab_jamo']:,}" if korean else f"{r['vocab_cjk']:,}"
        print(
            f"  {label:30} {flags or '(none)':38} {kept:>10} {vocab:>15} {r['unk_in']:>8.2%} {r['unk_out']:>9.2%} "
            f"{r['per_word']:>14.2f} {r['per_word_out']:>5.2f} {r['per_sentence']:>11.1f} "
            f"{'yes' if r['warning'] else 'no':>5}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parent
    parser.add_argument(
        "--data",
        default=os.environ.get("BERTPREP_DATA", str(here.parents[1] / "shared" / "data")),
        help="the shared data folder (default: $BERTPREP_DATA, else ../shared/data)",
    )
    parser.add_argument("--vocab-size", type=int, default=3000)
    parser.add_argument("--zh-vocab-size", type=int, default=8000)
    args = parser.parse_args()
    data = Path(args.data)
    ko, zh = data / "cjk" / "ko", data / "cjk" / "zh"
    if not ko.is_dir() or not zh.is_dir():
        print(f"{data}: no cjk/ko and cjk/zh (pass --data)", file=sys.stderr)
        return 2

    ko_all = _sentences(sorted(ko.glob("*.txt")))
    ko_train = _sentences([ko / "constitution-of-korea.txt"])
    ko_heldout = _sentences([ko / "wikipedia-hangugeo.txt"])
    stats = accent_stripping_stats(Counter("".join(ko_all)))
    print(
        f"Korean: {len(ko_all):,} sentences, {stats.letters:,} letters, of which {stats.hangul_syllables:,} "
        f"Hangul syllables; accent stripping changes {stats.share:.1%} of the letters"
    )
    ko_settings = [
        *((label_, f, s, 1000) for label_, f, s in SETTINGS),
        (
            "no stripping, every char kept",
            "--no-strip-accents --limit-alphabet 0",
            dict(do_lower_case=True, strip_accents=False),
            None,
        ),
    ]
    rows = _rows(ko_settings, ko_all, ko_train, ko_heldout, args.vocab_size)
    _table(
        f"Korean, vocab_size {args.vocab_size:,} ([UNK] out: vocab from the constitution, text of the article)",
        f"bertprep build-vocab {ko} --input-format text --vocab-size {args.vocab_size} FLAGS",
        rows,
        True,
    )

    zh_files = sorted(zh.glob("*.txt"))
    zh_all = _sentences(zh_files)
    zh_train = _sentences([p for p in zh_files if not p.name.startswith("luxun")])
    zh_heldout = _sentences([p for p in zh_files if p.name.startswith("luxun")])
    distinct = len({c for s in zh_all for c in s if _is_cjk(c)})
    print(f"\nChinese: {len(zh_all):,} sentences, {distinct:,} distinct ideographs")
    zh_settings = [
        *((label_, f, s, 1000) for label_, f, s in SETTINGS[:2]),
        ("uncased, every character kept", "--limit-alphabet 0", dict(do_lower_case=True), None),
    ]
    rows = _rows(zh_settings, zh_all, zh_train, zh_heldout, args.zh_vocab_size)
    _table(
        f"Chinese, vocab_size {args.zh_vocab_size:,} ([UNK] out: vocab without the Lu Xun stories, text of them)",
        f"bertprep build-vocab {zh} --input-format text --vocab-size {args.zh_vocab_size} FLAGS",
        rows,
        False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
