"""BERT text normalization: lower-casing and accent stripping as two settings, and what stripping breaks.

The original ``BasicTokenizer`` (google-research/bert ``tokenization.py``) ties both to ``do_lower_case``:
uncased text is lower-cased *and* stripped of accents (``_run_strip_accents``: Unicode NFD, then every
character of category ``Mn`` dropped). Hugging Face ``tokenizers``' ``BertNormalizer`` takes the two apart
(``lowercase``, ``strip_accents``; ``strip_accents=None`` means "follow ``lowercase``", the original's
behaviour) and ``transformers``' ``BertTokenizerFast`` reads ``strip_accents`` from
``tokenizer_config.json``. bertprep uses the same rule everywhere: ``strip_accents`` is ``None`` (follow
``do_lower_case``) unless chosen.

NFD is harmless for Latin accents (``café`` -> ``cafe``, the point of an uncased vocab) but not for every
script: it splits each Hangul syllable into its conjoining jamo (``한`` -> ``ᄒ ᅡ ᆫ``), turns Vietnamese
``ế`` into ``e``, Greek ``ά`` into ``α``, Russian ``й`` into ``и``, and drops the vowel signs and viramas of
Devanagari or Thai. :func:`accent_stripping_stats` measures the share of a text's letters that is hit;
:func:`hangul_vocab_counts` tells a vocab built from jamo from one built from syllables. Google's
multilingual notes (google-research/bert ``multilingual.md``) recommend the cased model for non-Latin
alphabets for this reason.

The one place of the casing and accent rules: :func:`resolve_strip_accents` (the original's default),
:func:`resolve_strip_accents_setting` (a model's recorded settings against an explicit choice), :func:`looks_cased`
(a vocab's casing read from its entries). No Beam, no torch: ``pipeline/`` and ``bert_model/`` both import it.
"""  # noqa: RUF002 (the Greek alpha is the point of the example)

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import normalizers

logger = logging.getLogger(__name__)

#: Share of the letters read above which build-vocab warns that accent stripping damages the corpus.
WARN_SHARE = 0.01
#: Hangul syllables (precomposed, U+AC00..U+D7A3): NFD splits each into 2-3 conjoining jamo.
HANGUL_SYLLABLES = (0xAC00, 0xD7A3)
#: Conjoining jamo blocks: Hangul Jamo, Jamo Extended-A, Jamo Extended-B (what NFD of a syllable gives).
CONJOINING_JAMO = ((0x1100, 0x11FF), (0xA960, 0xA97F), (0xD7B0, 0xD7FF))
#: Latin letters (Basic Latin .. Latin Extended-B) and the combining diacritics they take: stripping these
#: is what an uncased vocab wants, so they never count as damage.
_LATIN_LETTERS_END = 0x024F
_LATIN_MARKS = (0x0300, 0x036F)
#: Entries of each kind a vocab needs before :func:`vocab_strip_accents` draws a conclusion from it.
_MIN_VOCAB_EVIDENCE = 20
#: ... and the share of its learned entries (not bracketed specials) they must make: Google's English uncased
#: vocab holds 70 jamo among 29,523 learned entries (0.24%), leftovers of the few Korean words in its corpus,
#: which say nothing about how Korean text should be normalised for it; a vocab built on Korean holds thousands.
_MIN_VOCAB_SHARE = 0.01


def resolve_strip_accents(strip_accents: bool | None, do_lower_case: bool) -> bool:
    """The accent stripping actually applied: ``strip_accents``, or ``do_lower_case`` when it is ``None``
    (the original BERT and ``BertNormalizer(strip_accents=None)``)."""
    return do_lower_case if strip_accents is None else bool(strip_accents)


def resolve_strip_accents_setting(
    requested: bool | None, recorded: bool | None, recorded_lower: bool | None, do_lower_case: bool
) -> bool:
    """The accent stripping to tokenize with, given the casing ``do_lower_case`` already chosen: the explicit
    choice (warning when the model recorded the other), else the model's record where it differs from the
    model's recorded casing (a model trained with ``--no-strip-accents``), else ``do_lower_case`` (the
    original's rule, so a casing override changes both as before)."""
    if requested is not None:
        if recorded is not None and recorded != requested:
            logger.warning(
                "strip_accents=%s given, but the model was trained with strip_accents=%s", requested, recorded
            )
        return requested
    if recorded is not None and (recorded_lower is None or recorded != recorded_lower):
        return recorded
    return do_lower_case


def looks_cased(tokens: Sequence[str]) -> bool:
    """True when the vocab has upper-case word pieces outside bracketed special entries (20 or more)."""
    upper = 0
    for token in tokens:
        if token.startswith("[") and token.endswith("]"):
            continue
        if any(c.isupper() for c in token):
            upper += 1
            if upper >= 20:
                return True
    return False


def bert_normalizer(do_lower_case: bool, strip_accents: bool | None = None) -> normalizers.BertNormalizer:
    """``BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=..., lowercase=...)``
    with ``strip_accents`` written out (resolved by :func:`resolve_strip_accents`): an explicit value
    survives re-serialization by other tools unchanged."""
    from tokenizers import normalizers  # (here: the casing rules above are standard library only)

    return normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=resolve_strip_accents(strip_accents, do_lower_case),
        lowercase=do_lower_case,
    )


def normalizer_settings(normalizer: Mapping | None) -> tuple[bool | None, bool | None]:
    """``(lowercase, strip_accents)`` of a ``tokenizer.json`` ``"normalizer"`` entry, each ``None`` when the
    file does not say. ``strip_accents`` is the effective value (a ``BertNormalizer``'s ``null`` follows its
    ``lowercase``); ``Sequence``, ``Lowercase`` and ``StripAccents`` normalizers are understood too."""
    if not normalizer:
        return None, None
    kind = normalizer.get("type")
    if kind == "BertNormalizer":
        lowercase = bool(normalizer.get("lowercase", True))
        strip = normalizer.get("strip_accents")
        return lowercase, lowercase if strip is None else bool(strip)
    if kind == "Lowercase":
        return True, None
    if kind == "StripAccents":
        return None, True
    if kind == "Sequence":
        sequence_lower: bool | None = None
        sequence_strip: bool | None = None
        for item in normalizer.get("normalizers", []):
            item_lower, item_strip = normalizer_settings(item)
            sequence_lower = item_lower if sequence_lower is None else sequence_lower
            sequence_strip = item_strip if sequence_strip is None else sequence_strip
        return sequence_lower, sequence_strip
    return None, None


def strip_accents_flag(strip_accents: bool) -> str:
    """The command-line flag that selects ``strip_accents``."""
    return "--strip-accents" if strip_accents else "--no-strip-accents"


def is_hangul_syllable(char: str) -> bool:
    return HANGUL_SYLLABLES[0] <= ord(char) <= HANGUL_SYLLABLES[1]


def is_conjoining_jamo(char: str) -> bool:
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in CONJOINING_JAMO)


def _damaged_by_stripping(char: str) -> bool:
    """Whether NFD + dropping ``Mn`` changes ``char`` (a letter or mark) outside the Latin accents."""
    code = ord(char)
    if code <= _LATIN_LETTERS_END or _LATIN_MARKS[0] <= code <= _LATIN_MARKS[1]:
        return False
    if unicodedata.category(char) == "Mn":
        return True  # dropped: a vowel sign, virama, tone mark...
    return unicodedata.normalize("NFD", char) != char  # a Hangul syllable, ế, ά, й...


@dataclass
class AccentStats:
    """What accent stripping does to a text, counted per character (before any normalization).

    Attributes:
        letters: characters of the text that are letters or marks (Unicode categories ``L*``, ``M*``).
        damaged: those that NFD + dropping ``Mn`` changes, Latin letters and their accents excepted.
        hangul_syllables: the Hangul syllables among ``damaged``.
        examples: the most frequent damaged characters, most frequent first (at most 5).
    """

    letters: int = 0
    damaged: int = 0
    hangul_syllables: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        """``damaged / letters`` (0..1; 0 for a text without letters)."""
        return self.damaged / self.letters if self.letters else 0.0


def accent_stripping_stats(char_counts: Mapping[str, int]) -> AccentStats:
    """Count what accent stripping damages in a text given as ``{character: occurrences}`` (e.g. a
    ``collections.Counter`` updated with every sentence read)."""
    stats = AccentStats()
    damaged: list[tuple[int, str]] = []
    for char, count in char_counts.items():
        if unicodedata.category(char)[0] not in "LM":
            continue
        stats.letters += count
        if _damaged_by_stripping(char):
            stats.damaged += count
            damaged.append((count, char))
            if is_hangul_syllable(char):
                stats.hangul_syllables += count
    stats.examples = [c for _, c in sorted(damaged, key=lambda x: (-x[0], x[1]))[:5]]
    return stats


def accent_stripping_warning(
    stats: AccentStats, *, cased_flag: str = "--cased", threshold: float = WARN_SHARE
) -> str | None:
    """The warning for a text whose letters accent stripping damages in a share of ``threshold`` or more
    (``None`` below it): the share, what breaks, and the fix (``--no-strip-accents`` or ``cased_flag``)."""
    if stats.share < threshold or not stats.damaged:
        return None
    other = stats.damaged - stats.hangul_syllables
    parts = []
    if stats.hangul_syllables:
        parts.append(f"{stats.hangul_syllables:,} Hangul syllables, which NFD splits into conjoining jamo")
    if other:
        parts.append(f"{other:,} other letters and marks that NFD changes or drops")
    return (
        f"accent stripping (on with lower-casing, as the original do_lower_case) changes {stats.share:.1%} of "
        f"the letters read ({stats.damaged:,} of {stats.letters:,}: {'; '.join(parts)}; most frequent: "
        f"{' '.join(stats.examples)}). Words of these scripts become strings of letter pieces and the vocab "
        f"spends its entries on them. Pass --no-strip-accents to keep them whole (still lower-cased), or "
        f"{cased_flag} for a cased vocab."
    )


def hangul_vocab_counts(tokens: Iterable[str]) -> tuple[int, int]:
    """``(entries holding a Hangul syllable, entries holding a conjoining jamo)`` of a vocab (a ``##``
    prefix and bracketed special entries are ignored)."""
    syllables = jamo = 0
    for token in tokens:  # (one regular-expression search each: a per-character test took ~70 ms a vocab)
        if token.startswith("[") and token.endswith("]"):
            continue
        if _HANGUL_SYLLABLE.search(token):
            syllables += 1
        if _CONJOINING_JAMO.search(token):
            jamo += 1
    return syllables, jamo


def _char_class(ranges: Sequence[tuple[int, int]]) -> re.Pattern[str]:
    return re.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in ranges) + "]")


_HANGUL_SYLLABLE = _char_class([HANGUL_SYLLABLES])
_CONJOINING_JAMO = _char_class(CONJOINING_JAMO)


def vocab_strip_accents(tokens: Iterable[str]) -> bool | None:
    """The accent stripping a vocab was evidently built with, from its Korean entries: ``True`` for a
    vocab of conjoining jamo without a Hangul syllable (built from stripped text), ``False`` for syllables
    without jamo, ``None`` when it cannot tell (no Korean, too little, or both). Too little: fewer than
    ``_MIN_VOCAB_EVIDENCE`` entries or under ``_MIN_VOCAB_SHARE`` of the learned ones."""
    tokens = list(tokens)
    syllables, jamo = hangul_vocab_counts(tokens)
    needed = max(_MIN_VOCAB_EVIDENCE, _MIN_VOCAB_SHARE * sum(1 for t in tokens if not _is_special(t)))
    if jamo >= needed and not syllables:
        return True
    if syllables >= needed and not jamo:
        return False
    return None


def _is_special(token: str) -> bool:
    return token.startswith("[") and token.endswith("]")


def check_vocab_strip_accents(tokens: Sequence[str], strip_accents: bool, source: str) -> str | None:
    """A warning text when the run's (effective) ``strip_accents`` does not suit the vocab's Korean entries,
    else ``None``: stripping with a vocab of syllables turns every Korean word into [UNK], not stripping with
    a vocab of jamo does too, and a jamo vocab used with stripping is the sign of a vocab built
    with the defaults on Korean text."""
    syllables, jamo = hangul_vocab_counts(tokens)
    built_stripped = vocab_strip_accents(tokens)
    learned = sum(1 for t in tokens if not (t.startswith("[") and t.endswith("]")))
    if built_stripped is None:
        return None
    if built_stripped and strip_accents:
        return (
            f"{source}: {jamo:,} of its {learned:,} entries ({jamo / max(learned, 1):.1%}) are conjoining "
            "Hangul jamo and none is a Hangul syllable: it was built with accent stripping, which splits "
            "every Korean syllable into letters, so Korean words become long strings of jamo pieces. For "
            "Korean, rebuild it with `bertprep build-vocab --no-strip-accents` (or --cased) and make the "
            "shards with --no-strip-accents (or --no-do-lower-case)"
        )
    if built_stripped and not strip_accents:
        return (
            f"{source}: {jamo:,} entries are conjoining Hangul jamo and none is a Hangul syllable (a vocab "
            "built with accent stripping) but accents are not stripped here: Korean words will be [UNK]; "
            "pass --strip-accents or rebuild the vocab with --no-strip-accents"
        )
    if strip_accents:
        return (
            f"{source}: {syllables:,} entries are Hangul syllables and none is a conjoining jamo (a vocab built "
            "without accent stripping) but accents are stripped here, which splits every syllable into "
            "jamo: Korean words will be [UNK]; pass --no-strip-accents"
        )
    return None
