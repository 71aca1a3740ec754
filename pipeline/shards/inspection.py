"""Human-readable views of a shard directory: manifest statistics and instances decoded back to text."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from bertprep.core import schema, storage


def _shown_config_value(config: dict, key: str) -> str:
    """A manifest config value as ``inspect`` shows it: what the shards were made with. Dynamic-masking shards
    record the requested ``dupe_factor`` but are made in one pass (the trainer masks afresh each epoch)."""
    if key == "dupe_factor" and config.get("masking") == "dynamic" and config[key] != 1:
        return f"1 (dynamic masking; {config[key]} requested)"
    return str(config[key])


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _masking_shown(manifest: dict[str, Any]) -> str:
    """The masked positions as the summary and ``inspect`` show them: counts of static masking, or that the
    trainer masks dynamic shards (they hold no masks, so their counts are zeros)."""
    m = manifest["statistics"]["masked"]
    if manifest["config"].get("masking") == "dynamic":
        rate = manifest["config"].get("masked_lm_prob")
        return "masked at training time (--masking dynamic" + (f", masked_lm_prob {rate})" if rate else ")")
    per_token = "n/a" if m["per_token"] is None else f"{m['per_token']:.3f}"
    return (
        f"{m['positions']:,} ({per_token} per token, {m['per_instance']:.1f} per instance); "
        f"[MASK] {_pct(m['mask_share'])}, random {_pct(m['random_share'])}, kept {_pct(m['kept_share'])}"
    )


def objective_of(manifest: dict[str, Any]) -> str:
    """The pre-training objective the shards were made for (``config.objective``; older manifests: nsp)."""
    return str(manifest.get("config", {}).get("objective", "nsp"))


def _sentence_task(s: dict[str, Any], objective: str, short: bool = False) -> tuple[str, str]:
    """``(name, figure)`` of the sentence task in the statistics ``s``: the NotNext share (nsp), the swapped
    share (sop) or the document separators (none); ``short`` leaves the details out."""
    if objective == "sop":
        chunks = s.get("one_segment_chunks", {})
        text = f"swapped {_pct(s.get('swapped_share'))}"
        if not short:
            text += (
                f" (one-sentence chunks: {chunks.get('merged', 0):,} merged with the next sentence, "
                f"{chunks.get('skipped', 0):,} skipped at a document's end with "
                f"{chunks.get('tokens_skipped', 0):,} tokens)"
            )
        return "SOP", text
    if objective == "none":
        return "objective", f"none (no sentence task), {s.get('document_separators', 0):,} document separators"
    text = _pct(s["not_next_share"])
    return "NotNext", text if short else f"{text} ({s['not_next_same_document']:,} from the same document)"


def _split_and_dedup(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for the corpus controls the run had, in this order: the held-out split, the mixture of sources,
    decontamination and deduplication (``heldout.manifest_sections`` and the others'); none for one it did not
    have."""
    return [
        *_split_rows(manifest.get("split")),
        *_mixture_rows(manifest.get("mixture")),
        *_decontamination_rows(manifest.get("decontamination")),
        *_dedup_rows(manifest),
    ]


def _split_rows(split: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The held-out split's row (the manifest's ``split`` section): fraction, seed, documents per side and where
    the other set is; none without a split."""
    if not split:
        return []
    where = (
        f"eval set in {split['eval_dir']}/"
        if split["role"] == "train"
        else f"this is the eval set; training set in {split['train_dir']}"
    )
    return [
        (
            "held-out split",
            f"eval_fraction {split['eval_fraction']} (eval_seed {split['eval_seed']}): "
            f"{split['train_documents']:,} training / {split['eval_documents']:,} eval "
            f"documents; {where}",
        )
    ]


def _mixture_rows(mixture: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The mixture's rows (the manifest's ``mixture`` section): how the sources were weighed, then per source
    what it held, what was sampled and the shares asked -> realised; none without a mixture."""
    if not mixture:
        return []
    how = (
        f"temperature alpha {mixture['temperature_alpha']}"
        if mixture.get("temperature_alpha") is not None
        else "weights"
    )
    rows = [
        (
            "mixture",
            f"{len(mixture['sources'])} sources by {how}; share of word pieces asked -> realised in the "
            "sampled documents, in the instances (by their first segment) and their word pieces",
        )
    ]
    for src in mixture["sources"]:
        realised = f"{_pct(src.get('asked_token_share'))} -> {_pct(src.get('token_share'))}"
        if "instance_share" in src:  # manifests before instances were counted per source lack them
            realised += f", {_pct(src['instance_share'])}, {_pct(src['instance_token_share'])}"
            made = f"; {src['instances']:,} instances"
        else:
            made = ""
        rows.append(
            (
                f"  {src['name']}",
                f"{src['files']:,} files, {src['bytes']:,} bytes, {src['documents_in']:,} documents; weight "
                f"{src['weight']}, rate {src['rate']}: {src['documents']:,} documents, {src['tokens']:,} word "
                f"pieces{made}; share {realised}",
            )
        )
    return rows


def _decontamination_rows(decon: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Decontamination's rows (the manifest's ``decontamination`` section): mode, n-gram size and what it
    matched, dropped and cut, then per evaluation file its texts and n-grams; none without it."""
    if not decon:
        return []
    rows = [
        (
            "decontamination",
            f"{decon['mode']}, {decon['ngram']}-grams: {decon['documents_matched']:,} documents matched, "
            f"{decon['documents_dropped']:,} dropped, {decon['sentences_cut']:,} sentences cut",
        )
    ]
    for f in decon["files"]:
        rows.append(
            (
                f"  {f['path']}",
                f"{f['format']}: {f['texts']:,} texts ({f['texts_too_short']:,} too short), {f['ngrams']:,} "
                f"n-grams; {f['documents_matched']:,} documents matched",
            )
        )
    return rows


def _dedup_rows(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """Deduplication's row (the manifest's ``dedup`` section): method and the copies dropped of the documents
    read; none without dedup."""
    dedup = manifest.get("dedup")
    if not dedup:
        return []
    return [
        (
            "dedup",
            f"{dedup['method']}: {dedup['documents_dropped']:,} of {manifest['statistics']['documents']['read']:,} "
            f"documents dropped as copies ({dedup['duplicate_groups']:,} texts had copies)",
        )
    ]


def format_summary(manifest: dict[str, Any], shard_dir: str = "") -> str:
    """Short summary printed at the end of make-shards."""
    s = manifest["statistics"]
    m = s["masked"]
    lines = [
        f"Wrote {s['instances']:,} instances in {len(manifest['shards'])} shards to {shard_dir or '.'}",
        f"  documents {s['documents']['used']:,} used / {s['documents']['read']:,} read, "
        f"sentences {s['sentences']:,}, {' '.join(_sentence_task(s, objective_of(manifest), short=True))}, "
        + (
            "masked at training time (--masking dynamic)"
            if manifest["config"].get("masking") == "dynamic"
            else f"masked/token {'n/a' if m['per_token'] is None else format(m['per_token'], '.3f')}, "
            f"[MASK]/random/kept {_pct(m['mask_share'])}/{_pct(m['random_share'])}/{_pct(m['kept_share'])}"
        ),
        *(f"  {name}: {text}" for name, text in _split_and_dedup(manifest)),
        f"  run `bertprep inspect {shard_dir or '.'}` for details",
    ]
    return "\n".join(lines)


#: The settings ``inspect`` shows on its ``config`` line, in this order (each where the manifest has it).
_CONFIG_SHOWN = (
    "objective",
    "max_seq_length",
    "max_predictions_per_seq",
    "masked_lm_prob",
    "short_seq_prob",
    "dupe_factor",
    "random_seed",
    "do_lower_case",
    "strip_accents",
    "do_whole_word_mask",
    "masking_scheme",
    "max_ngram_size",
    "span_geometric_p",
    "max_span_length",
    "word_segmenter",
    "masking",
    "sampling",
    "sampling_requested",
    "pairing_scope",
    "bucket_size",
    "bucket_tokens",
)


def _config_shown(config: dict[str, Any]) -> str:
    """``inspect``'s ``config`` line: ``key=value`` of each :data:`_CONFIG_SHOWN` setting the manifest's
    ``config`` has (not None), as :func:`_shown_config_value` shows it."""
    return ", ".join(
        f"{k}={_shown_config_value(config, k)}"
        for k in _CONFIG_SHOWN
        if config.get(k) is not None  # (bucket_size None: buckets cut by bucket_tokens)
    )


def _shards_shown(shards: list[dict[str, Any]]) -> str:
    """``inspect``'s ``shards`` line: the manifest's shard files, their rows in all and the fewest-most rows of
    one."""
    total_rows = sum(x["rows"] for x in shards)
    return (
        f"{len(shards)} files, {total_rows:,} rows "
        f"({min(x['rows'] for x in shards):,}-{max(x['rows'] for x in shards):,} per shard)"
    )


def format_statistics(manifest: dict[str, Any]) -> str:
    """All manifest statistics, one per line, with the config that made the shards."""
    s = manifest["statistics"]
    c = manifest["config"]
    v = manifest["vocab"]
    rows = [
        ("made by", manifest.get("created_by", "?")),
        ("config", _config_shown(c)),
        ("vocab", f"{v['size']:,} entries, sha256 {v['sha256'][:16]}..., specials {v['special_token_ids']}"),
        ("shards", _shards_shown(manifest["shards"])),
        ("files read", f"{s['files']:,} ({', '.join(f'{k}: {n}' for k, n in s['formats'].items())})"),
        (
            "documents",
            f"{s['documents']['read']:,} read, {s['documents']['used']:,} used, "
            f"{s['documents']['one_sentence']:,} with one sentence",
        ),
        ("documents skipped", ", ".join(f"{k}: {n:,}" for k, n in s["documents"]["skipped"].items()) or "none"),
        *_split_and_dedup(manifest),
        ("lines skipped", ", ".join(f"{k}: {n:,}" for k, n in s["lines_skipped"].items()) or "none"),
        ("undecodable lines", f"{s['undecodable_lines']:,}"),
        (
            "sentences",
            f"{s['sentences']:,} ({s['sentences_dropped_empty_after_tokenization']:,} dropped: "
            "no word piece left after normalization)",
        ),
        ("[UNK] rate", _pct(s["unk_rate"])),
        ("instances", f"{s['instances']:,} in {s['buckets']:,} buckets"),
        _sentence_task(s, objective_of(manifest)),
        (
            "tokens",
            f"{s['tokens']:,} (mean length {s['mean_length']:.1f}), full length {_pct(s['full_length_share'])}, "
            f"truncated {_pct(s['truncated_share'])}",
        ),
        ("masked positions", _masking_shown(manifest)),
    ]
    width = max(len(k) for k, _ in rows)
    out = [f"{k.rjust(width)}  {val}" for k, val in rows]
    out.append(f"{'lengths'.rjust(width)}  {format_histogram(s['length_histogram'], c.get('max_seq_length', 128))}")
    return "\n".join(out)


def format_histogram(hist: dict[str, int], max_seq_length: int, bins: int = 8) -> str:
    """Length histogram in ``bins`` equal-width bins, e.g. ``1-16: 2.0% | ... | 113-128: 85.1%``."""
    total = sum(hist.values())
    if not total:
        return "n/a"
    width = max(1, -(-max_seq_length // bins))
    parts = []
    for b in range(bins):
        lo, hi = b * width + 1, min((b + 1) * width, max_seq_length)
        n = sum(v for k, v in hist.items() if lo <= int(k) <= hi)
        parts.append(f"{lo}-{hi}: {100 * n / total:.1f}%")
    return " | ".join(parts)


#: The local path of a directory's shard ``index`` (in manifest order); raises ``ValueError`` naming the shard
#: when it cannot be had (a bucket's shard fetched into a cache: ``remote_shards.ShardCache.fetch``).
ShardPath = Callable[[int], str]


def load_vocab_tokens(shard_dir: str, manifest: dict[str, Any] | None = None) -> list[str]:
    """The tokens in id order of a local shard directory's vocab (or of the folder holding a bucket directory's
    tokenizer files, with its ``manifest``), parsed as make-shards parsed it: a ``vocab.txt`` by
    ``vocab_files.parse_vocab_txt``, a BPE / Unigram ``tokenizer.json`` (as the manifest names it) by
    ``pretrained_tokenizer.load_pretrained_tokenizer``."""
    from bertprep.core.pretrained_tokenizer import load_pretrained_tokenizer
    from bertprep.core.vocab_files import parse_vocab_txt

    manifest = manifest if manifest is not None else storage.read_manifest(shard_dir)
    path = os.path.join(shard_dir, (manifest.get("vocab") or {}).get("file") or schema.VOCAB_TXT)
    if not path.endswith(schema.VOCAB_TXT):
        return load_pretrained_tokenizer(path).tokens
    with open(path, encoding="utf-8") as f:
        return parse_vocab_txt(f.read(), path)


def iter_rows(
    shard_dir: str, manifest: dict[str, Any] | None = None, shard_path: ShardPath | None = None
) -> Iterator[dict[str, Any]]:
    """Rows of a finished shard directory as Python dicts, shard by shard: a local one, or one in a bucket whose
    shards ``shard_path`` fetches (each when its first row is reached).

    Raises ``ValueError`` naming the shard when it is not a readable Arrow file (truncated, overwritten) or
    cannot be fetched."""
    manifest = manifest if manifest is not None else storage.read_manifest(shard_dir)
    for index in range(len(manifest["shards"])):
        path = shard_path(index) if shard_path else os.path.join(shard_dir, manifest["shards"][index]["file"])
        try:
            reader = schema.read_shard(path)
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        except (pa.ArrowException, OSError) as err:
            raise ValueError(
                f"{path}: not a readable Arrow file ({err}); the shard is damaged, run "
                "'bertprep inspect --verify' and re-create the shards"
            ) from None
        for batch in batches:
            yield from batch.to_pylist()


def decode_instance(row: dict[str, Any], tokens: list[str], objective: str = "nsp") -> str:
    """One instance as text: ``[CLS] a b [SEP] c {[MASK]→d} [SEP]  (IsNext, 9 tokens)``.

    A masked position is shown as ``{shown→label}``: ``{[MASK]→cat}`` (80%), ``{dog→cat}`` (random, 10%),
    ``{cat→cat}`` (kept, 10%). The label reads IsNext / NotNext (objective ``nsp``), InOrder / Swapped
    (``sop``); objective ``none`` rows have none.
    """
    labels = dict(zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True))
    out = []

    def token(token_id: int) -> str:  # an id outside the vocab (a damaged shard) is shown, not an IndexError
        return tokens[token_id] if 0 <= token_id < len(tokens) else f"<id {token_id} outside the vocab>"

    for pos, token_id in enumerate(row["input_ids"]):
        text = token(token_id)
        if pos in labels:
            text = f"{{{text}→{token(labels[pos])}}}"
        out.append(text)
    if objective == "none" or "next_sentence_label" not in row:
        return f"{' '.join(out)}  ({len(row['input_ids'])} tokens)"
    names = ("InOrder", "Swapped") if objective == "sop" else ("IsNext", "NotNext")
    label = names[1] if row["next_sentence_label"] else names[0]
    return f"{' '.join(out)}  ({label}, {len(row['input_ids'])} tokens)"


def _verify_word_ids(
    column,
    offsets,
    unmasked,
    row_of_tok,
    row_of_pos,
    positions,
    cls_id: int,
    sep_id: int,
    whole_words: bool,
    where: str,
    error,
) -> None:
    """The ``word_ids`` checks of :func:`verify_shards` on one record batch: one entry per token, -1 exactly
    at [CLS]/[SEP], words numbered 0, 1, ... in order within each row; with static word-level masking, every
    word with a masked piece masked whole."""
    import numpy as np

    if not np.array_equal(schema.numpy_view(column.offsets), offsets):
        error(f"{where}: word_ids rows are not as long as their input_ids")
        return
    word_ids = schema.numpy_view(column.values).astype(np.int64)
    special = (unmasked == cls_id) | (unmasked == sep_id)
    if ((word_ids == -1) != special).any():
        error(f"{where}: word_ids is not -1 exactly at [CLS] and [SEP]")
        return
    inner = np.flatnonzero(~special)
    rows, words = row_of_tok[inner], word_ids[inner]
    first = np.ones(len(inner), dtype=bool)
    first[1:] = rows[1:] != rows[:-1]
    step = np.diff(words, prepend=0)
    if (words[first] != 0).any() or ((step[~first] != 0) & (step[~first] != 1)).any():
        error(f"{where}: word_ids are not numbered 0, 1, ... in order within each row")
        return
    if whole_words and len(positions):
        key = rows * (1 << 20) + words
        masked_key = row_of_pos * (1 << 20) + word_ids[offsets[:-1][row_of_pos] + positions]
        chosen, masked_count = np.unique(masked_key, return_counts=True)
        all_keys, piece_count = np.unique(key, return_counts=True)
        if (piece_count[np.searchsorted(all_keys, chosen)] != masked_count).any():
            error(f"{where}: a word is only partly masked (masking scheme masks whole words)")


def verify_shards(
    shard_dir: str, manifest: dict[str, Any] | None = None, shard_path: ShardPath | None = None
) -> dict[str, Any]:
    """Check every row of a finished shard directory against the manifest and the format's invariants: a local
    one, or one in a bucket whose shards ``shard_path`` fetches one by one (a shard it cannot fetch, missing or
    with other bytes than the manifest's, is reported as this says and the others are still checked).

    Per shard: the file's sha256, row and token counts equal the manifest's. Per row, after undoing the
    masking (labels put back at ``masked_lm_positions``): length <= ``max_seq_length``; ``[CLS]`` first;
    exactly two ``[SEP]``, the last token being one; ``token_type_ids`` 0 up to and including the first
    ``[SEP]`` and 1 after it; positions strictly ascending, inside the row, never on [CLS]/[SEP], at most
    ``max_predictions_per_seq`` of them (static masking); every id in ``input_ids`` and ``masked_lm_ids`` below
    the vocab size. A shard that is missing or not a readable Arrow file is reported by name and the others
    are still checked.

    With a ``word_ids`` column: one entry per token, -1 exactly at [CLS]/[SEP], words numbered in order, and
    (static masking under a word-level ``masking_scheme``) no word partly masked.

    Per objective (``config.objective``): each shard has the objective's columns (:func:`schema.columns`).
    ``nsp`` and ``sop``: A and B are not empty, and the share of rows labelled 1 is the manifest's
    ``not_next_share`` / ``swapped_share``. ``none`` instead of the two-[SEP] and token-type rules: token
    types all 0, the ``[SEP]`` between the first and the last token add up to the manifest's
    ``document_separators``, and at most one row per bucket and pass (``buckets`` x ``dupe_factor``; 1 pass
    with dynamic masking) is shorter than ``max_seq_length``.

    Returns:
        ``{"rows": n, "shards": k, "errors": [messages...]}``; an empty ``errors`` list means all is well
        (at most 20 messages are kept).
    """
    manifest = manifest if manifest is not None else storage.read_manifest(shard_dir)
    c = _Checks.from_manifest(manifest)
    for index, entry in enumerate(manifest["shards"]):
        if shard_path is None:
            _verify_shard(os.path.join(shard_dir, entry["file"]), entry, c)
            continue
        try:
            path = shard_path(index)
        except ValueError as err:  # the fetch's message names the object and what is wrong with it
            c.error(str(err))
            continue
        _verify_shard(path, entry, c)
    _verify_totals(manifest, c)
    return {"rows": c.total_rows, "shards": len(manifest["shards"]), "errors": c.errors}


@dataclass
class _Checks:
    """What ``verify_shards`` checks rows against (from the manifest), and what it has found so far."""

    cls_id: int
    sep_id: int
    max_len: int
    max_pred: int
    vocab_size: int
    objective: str
    has_word_ids: bool
    whole_words: bool
    """Static masking under a word-level masking scheme: no word may be partly masked."""
    static_masking: bool
    errors: list[str] = field(default_factory=list)
    """The first 20 problems found."""
    total_rows: int = 0
    label_ones: int = 0
    """Rows with ``next_sentence_label`` 1 (objectives nsp / sop)."""
    inner_separators: int = 0
    """[SEP] between a row's first and last token (objective none)."""
    short_rows: int = 0
    """Rows shorter than ``max_seq_length`` (objective none)."""

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any]) -> _Checks:
        specials = manifest["vocab"]["special_token_ids"]
        config = manifest["config"]
        scheme = config.get("masking_scheme", "whole-word" if config.get("do_whole_word_mask") else "token")
        static_masking = config.get("masking", "static") == "static"
        return cls(
            cls_id=specials["[CLS]"],
            sep_id=specials["[SEP]"],
            max_len=config["max_seq_length"],
            max_pred=config["max_predictions_per_seq"],
            vocab_size=int(manifest["vocab"]["size"]),
            objective=objective_of(manifest),
            has_word_ids="word_ids" in manifest.get("schema", {}).get("columns", ()),
            whole_words=scheme != "token" and static_masking,
            static_masking=static_masking,
        )

    def error(self, msg: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(msg)


def _verify_shard(path: str, entry: dict[str, Any], c: _Checks) -> None:
    """Check one shard of the manifest (``entry``) at the local ``path``: present, its sha256, its columns, every
    record batch, and its row and token counts."""
    if not os.path.isfile(path):
        c.error(f"{entry['file']}: missing (listed in the manifest)")
        return
    if schema.sha256_file(path) != entry["sha256"]:
        c.error(f"{entry['file']}: sha256 differs from the manifest (file changed or truncated)")
    rows = tokens = 0
    try:
        reader = schema.read_shard(path)
        if tuple(reader.schema.names) != schema.columns(c.objective, c.has_word_ids):
            c.error(
                f"{entry['file']}: columns {reader.schema.names}, objective {c.objective} has "
                f"{list(schema.columns(c.objective, c.has_word_ids))}"
            )
            return
        for b in range(reader.num_record_batches):
            batch_rows, batch_tokens = _verify_batch(reader.get_batch(b), entry["file"], b, c)
            rows, tokens = rows + batch_rows, tokens + batch_tokens
    except (pa.ArrowException, OSError) as err:
        c.error(f"{entry['file']}: not a readable Arrow file ({err}); the shard is damaged")
        return
    if rows != entry["rows"] or tokens != entry["tokens"]:
        c.error(
            f"{entry['file']}: {rows} rows / {tokens} tokens, the manifest says {entry['rows']} / {entry['tokens']}"
        )
    c.total_rows += rows


def _verify_batch(batch: pa.RecordBatch, file: str, b: int, c: _Checks) -> tuple[int, int]:
    """The per-row checks of ``verify_shards`` on record batch ``b`` of shard ``file``, after putting the labels
    back at the masked positions; returns the batch's rows and tokens."""
    import numpy as np

    ids_col, tt_col, pos_col, lab_col = (batch.column(i) for i in range(4))
    offsets = schema.numpy_view(ids_col.offsets)
    ids = schema.numpy_view(ids_col.values).astype(np.int64)
    tt = schema.numpy_view(tt_col.values)
    positions = schema.numpy_view(pos_col.values).astype(np.int64)
    labels = schema.numpy_view(lab_col.values).astype(np.int64)
    lengths = np.diff(offsets)
    m_lengths = np.diff(schema.numpy_view(pos_col.offsets))
    row_of_pos = np.repeat(np.arange(batch.num_rows), m_lengths)
    if len(positions) and (positions >= lengths[row_of_pos]).any():
        c.error(f"{file}: a masked position lies outside its row")
        positions = np.minimum(positions, lengths[row_of_pos] - 1)
    unmasked = ids.copy()
    unmasked[offsets[:-1][row_of_pos] + positions] = labels
    starts, ends = offsets[:-1], offsets[1:] - 1
    where = f"{file} batch {b}"
    _verify_ids_and_ends(ids, labels, unmasked, lengths, starts, ends, where, c)
    row_of_tok = np.repeat(np.arange(batch.num_rows), lengths)
    seps = np.bincount(row_of_tok[unmasked == c.sep_id], minlength=batch.num_rows)
    if c.objective == "none":
        if tt.any():
            c.error(f"{where}: token_type_ids not all 0 (objective none)")
        c.inner_separators += int(seps.sum()) - batch.num_rows
        c.short_rows += int((lengths < c.max_len).sum())
    else:
        _verify_segments(unmasked, tt, seps, starts, lengths, row_of_tok, where, c)
        c.label_ones += int(schema.numpy_view(batch.column("next_sentence_label")).astype(np.int64).sum())
    _verify_masked_positions(unmasked, offsets, positions, row_of_pos, m_lengths, where, c)
    if c.has_word_ids:
        _verify_word_ids(
            batch.column("word_ids"),
            offsets,
            unmasked,
            row_of_tok,
            row_of_pos,
            positions,
            c.cls_id,
            c.sep_id,
            c.whole_words,
            where,
            c.error,
        )
    return batch.num_rows, int(lengths.sum())


def _verify_ids_and_ends(ids, labels, unmasked, lengths, starts, ends, where: str, c: _Checks) -> None:
    """The checks of one record batch's rows as a whole: ``input_ids`` and ``masked_lm_ids`` (``labels``) within
    the vocab, no row longer than ``max_seq_length``, and each row (``unmasked``: labels put back) starting with
    [CLS] and ending with [SEP] (``starts``, ``ends``: flat indices of each row's first and last token)."""
    for name, values in (("input_ids", ids), ("masked_lm_ids", labels)):
        if len(values) and int(values.max()) >= c.vocab_size:
            c.error(f"{where}: {name} holds id {int(values.max())}, outside the vocab of {c.vocab_size} entries")
    if (lengths > c.max_len).any():
        c.error(f"{where}: {int((lengths > c.max_len).sum())} rows longer than max_seq_length {c.max_len}")
    if (unmasked[starts] != c.cls_id).any():
        c.error(f"{where}: rows not starting with [CLS]")
    if (unmasked[ends] != c.sep_id).any():
        c.error(f"{where}: rows not ending with [SEP]")


def _verify_masked_positions(unmasked, offsets, positions, row_of_pos, m_lengths, where: str, c: _Checks) -> None:
    """The masked-position checks of one record batch: positions strictly ascending within a row, none on [CLS]
    or [SEP] (``unmasked``: labels put back; ``row_of_pos``: the row of each position), and under static masking
    no row with more than ``max_predictions_per_seq`` (``m_lengths``: positions per row)."""
    import numpy as np

    if len(positions):
        same_row = row_of_pos[1:] == row_of_pos[:-1]
        if (np.diff(positions)[same_row] <= 0).any():
            c.error(f"{where}: masked positions not strictly ascending")
        if np.isin(unmasked[offsets[:-1][row_of_pos] + positions], [c.cls_id, c.sep_id]).any():
            c.error(f"{where}: a masked position is on [CLS] or [SEP]")
    if c.static_masking and (m_lengths > c.max_pred).any():
        c.error(f"{where}: more than max_predictions_per_seq {c.max_pred} predictions in a row")


def _verify_segments(unmasked, tt, seps, starts, lengths, row_of_tok, where: str, c: _Checks) -> None:
    """The sentence-pair checks (objectives nsp / sop) of one record batch: exactly two [SEP] per row,
    ``token_type_ids`` 0 through the first [SEP] and 1 after it, segments A and B not empty."""
    import numpy as np

    if (seps != 2).any():
        c.error(f"{where}: {int((seps != 2).sum())} rows without exactly two [SEP]")
    # token types: 0 through the first [SEP], 1 after it
    pos_in_row = np.arange(len(unmasked)) - np.repeat(starts, lengths)
    sep_rows = row_of_tok[unmasked == c.sep_id]
    sep_pos = pos_in_row[unmasked == c.sep_id]
    first_sep_pos = np.full(len(starts), np.iinfo(np.int64).max)
    np.minimum.at(first_sep_pos, sep_rows, sep_pos)
    expected_tt = (pos_in_row > first_sep_pos[row_of_tok]).astype(np.uint8)
    if (tt != expected_tt).any():
        c.error(f"{where}: token_type_ids do not switch to 1 right after the first [SEP]")
    if ((first_sep_pos < 2) | (first_sep_pos > lengths - 3)).any():
        c.error(f"{where}: rows with an empty segment A or B")


def _verify_totals(manifest: dict[str, Any], c: _Checks) -> None:
    """The whole-directory checks, when no row failed: the share of label-1 rows (nsp / sop); the document
    separators and the short rows (none)."""
    statistics = manifest.get("statistics", {})
    if c.objective in ("nsp", "sop") and c.total_rows and not c.errors:
        key = "swapped_share" if c.objective == "sop" else "not_next_share"
        if key in statistics and round(c.label_ones / c.total_rows, 6) != statistics[key]:
            c.error(
                f"next_sentence_label is 1 in {c.label_ones:,} of {c.total_rows:,} rows; the manifest's {key} "
                f"is {statistics[key]}"
            )
    if c.objective == "none" and not c.errors:
        if c.inner_separators != statistics.get("document_separators"):
            c.error(
                f"the rows hold {c.inner_separators:,} document separators, the manifest says "
                f"{statistics.get('document_separators')}"
            )
        config = manifest["config"]
        passes = 1 if config.get("masking", "static") == "dynamic" else int(config.get("dupe_factor", 1))
        allowed = max(1, int(statistics.get("buckets", 1))) * passes
        if c.short_rows > allowed:
            c.error(
                f"{c.short_rows:,} rows shorter than max_seq_length {c.max_len}; objective none fills every row "
                f"but the last of each bucket and pass (at most {allowed:,})"
            )
