"""make-shards' corpus controls: weighted sources (``mixture.py``), near-duplicate removal
(``near_dedup.py``) and decontamination (``decontamination.py``).

What users rely on: a source's rate is what its documents are multiplied by, decided per document the
same way in every process; copies are distinct documents on their original's side of the split; a
near-copy is dropped and its earlier original kept, in either pairing scope; a document holding an
evaluation text is caught and a clean one is not; bad options fail with a message naming what to fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # (not collected by pytest)
from apache_beam.testing.util import assert_that, equal_to

from beam_workers_factory import two_workers
from bertprep.pipeline import readers
from bertprep.pipeline.beam import decontamination, heldout, mixture, near_dedup
from bertprep.pipeline.beam.run import run_make_shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig, Source
from bertprep.pipeline.instances.bucket_files import TokenizedDocument
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.shards.inspection import format_statistics

ONE_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [f"w{k:03d}" for k in range(400)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """Two files in the BERT format, 60 documents each, of pseudo-random marker words."""
    root = tmp_path_factory.mktemp("corpus")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(SPECIALS + WORDS + ["."]) + "\n")
    rng = np.random.default_rng(0)
    files = []
    for name in ("a.txt", "b.txt"):
        blocks = []
        for _ in range(60):
            sentences = [" ".join(rng.choice(WORDS, 6 + int(rng.integers(6)))) + " ." for _ in range(3)]
            blocks.append("\n".join(sentences))
        (root / name).write_text("\n\n".join(blocks) + "\n")
        files.append(str(root / name))
    return {"vocab": str(vocab), "files": files, "root": root}


def _config(corpus, out, **kw) -> ShardsConfig:
    base = dict(
        inputs=tuple(corpus["files"]),
        vocab=corpus["vocab"],
        output_dir=str(out),
        input_format="bert",
        instance=InstanceConfig(max_seq_length=32, dupe_factor=1, mlm=MaskingConfig(max_predictions_per_seq=5)),
        bucket_size=30,
        num_shards=1,
    )
    base.update(kw)
    return ShardsConfig(**base)


def _shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("shard-*.arrow"))}


# ------------------------------------------------------------------------------------------ mixture


def _sampled(rate: float, source: str, ids: list, lengths: list) -> list[list[int]]:
    """The sentences each copy keeps, per document, as the pipeline decides them (plan, then per document)."""
    keys = [mixture.sampling_key(1, source, p, o) for p, o in ids]
    cut = None if rate == int(rate) else mixture.plan_fraction(keys, [sum(ls) for ls in lengths], rate - int(rate))
    return [mixture.copies_of(rate, key, cut, ls) for key, ls in zip(keys, lengths, strict=True)]


def test_rates_multiply_each_sources_word_pieces_up_to_one_sentence():
    rng = np.random.default_rng(0)
    ids = [(f"f{f}", o) for f in range(3) for o in range(300)]
    # documents of very unequal length (a few books among short articles): word pieces per sentence
    lengths = [list(rng.integers(5, 60, size=int(rng.choice([3, 20, 400], p=[0.5, 0.45, 0.05])))) for _ in ids]
    total = sum(map(sum, lengths))
    longest_sentence = max(max(ls) for ls in lengths)
    assert all(c == [len(ls)] * 2 for c, ls in zip(_sampled(2.0, "s", ids, lengths), lengths, strict=True))
    for rate in (0.3, 0.5, 1.25, 2.5):
        copies = _sampled(rate, "s", ids, lengths)
        tokens = sum(sum(ls[:k]) for c, ls in zip(copies, lengths, strict=True) for k in c)
        assert abs(tokens - rate * total) <= longest_sentence / 2 + 1, rate
        assert all(len(c) in (int(rate), int(rate) + 1) for c in copies)  # whole copies first, then the extra one
        cut = [c[-1] for c, ls in zip(copies, lengths, strict=True) if c and c[-1] < len(ls)]
        assert len(cut) <= 1  # at most one document is cut to its first sentences
        extra = sum(len(c) > int(rate) for c in copies) / len(ids)
        assert abs(extra - (rate - int(rate))) < 0.1, rate  # a share of documents near the fraction
    # the order is per source and seed, not per run: the same ids give the same choice, another source another
    assert _sampled(0.5, "s", ids, lengths) == _sampled(0.5, "s", ids, lengths)
    assert _sampled(0.5, "s", ids, lengths) != _sampled(0.5, "t", ids, lengths)


def test_the_cut_follows_the_key_order_whatever_order_documents_arrive_in():
    keys = [mixture.sampling_key(7, "s", "p", o) for o in range(50)]
    tokens = [10 * (o % 7 + 1) for o in range(50)]
    perm = list(np.random.default_rng(1).permutation(50))
    assert mixture.plan_fraction(keys, tokens, 0.4) == mixture.plan_fraction(
        [keys[i] for i in perm], [tokens[i] for i in perm], 0.4
    )
    assert mixture.plan_fraction(keys, tokens, 0.0) == (min(keys), 0)  # nothing fits: the first gets no sentence
    assert mixture.sentences_for([10, 10, 10], 14) == 1 and mixture.sentences_for([10, 10, 10], 16) == 2
    assert mixture.sentences_for([10, 10, 10], 15) == 1 and mixture.sentences_for([10, 10], 99) == 2


def test_sampling_is_the_same_in_another_process_whatever_pythonhashseed():
    code = (
        "from bertprep.pipeline.beam.mixture import sampling_key; "
        "print([sampling_key(3, 'w', 'p', o) for o in range(64)])"
    )
    here = str([mixture.sampling_key(3, "w", "p", o) for o in range(64)])
    env = dict(os.environ, PYTHONHASHSEED="1" if os.environ.get("PYTHONHASHSEED") != "1" else "2")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == here


def test_alpha_rates_follow_xlmr_temperature_sampling():
    sizes = [800, 150, 50]
    assert mixture.alpha_rates(sizes, 1.0) == pytest.approx([1.0, 1.0, 1.0])
    shares = [r * n / sum(sizes) for r, n in zip(mixture.alpha_rates(sizes, 0.0), sizes, strict=True)]
    assert shares == pytest.approx([1 / 3] * 3)  # alpha 0: equal shares
    rates = mixture.alpha_rates(sizes, 0.3)
    q = [r * n for r, n in zip(rates, sizes, strict=True)]
    assert sum(q) == pytest.approx(sum(sizes))  # same total size
    p = np.array(sizes) / sum(sizes)
    assert np.array(q) / sum(q) == pytest.approx(p**0.3 / (p**0.3).sum())


def test_copies_are_distinct_ids_on_their_documents_side():
    split = heldout.SplitSide(["a", "b"], 0.5, 0)

    def doc(ordinal: int) -> TokenizedDocument:
        return TokenizedDocument(1, ordinal, b"\x05\x00\x00\x00", b"\x01\x00\x00\x00", 0)

    for ordinal in range(200):
        sides = {split(doc(mixture.copy_ordinal(ordinal, c)), 2) for c in range(3)}
        assert sides == {split(doc(ordinal), 2)}
        assert mixture.base_ordinal(mixture.copy_ordinal(ordinal, 2)) == ordinal
        assert mixture.copy_ordinal(ordinal, 1) != ordinal


def test_source_settings_refuse_bad_values(tmp_path):
    # (the --source / --mixture parsing is tests/cli/test_shards_options.py's)
    with pytest.raises(ValueError, match="unique; given more than once: wiki"):
        ShardsConfig(inputs=("a",), vocab="v", output_dir="o", sources=(Source("wiki", ("a",)), Source("wiki", ("b",))))
    with pytest.raises(ValueError, match="pairing-scope global"):
        ShardsConfig(inputs=("a",), vocab="v", output_dir="o", sources=(Source("w", ("a",)),), pairing_scope="file")
    with pytest.raises(readers.InputError, match="source 'ghost'"):
        mixture.source_of_files([Source("ghost", (str(tmp_path / "nothing*.txt"),))], [])


@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_mixture_run_writes_the_rates_copies_and_is_worker_count_independent(corpus, tmp_path):
    a, b = corpus["files"]
    sources = (Source("a", (a,), 2.0), Source("b", (b,), 0.5))
    runs = {}
    for name, args in (("one", ONE_WORKER), ("two", TWO_WORKERS)):
        config = _config(corpus, tmp_path / name, sources=sources, eval_fraction=0.2)
        runs[name] = run_make_shards(config, args, workers=two_workers() if args is TWO_WORKERS else None)
    assert _shard_bytes(tmp_path / "one") == _shard_bytes(tmp_path / "two")
    mix = {s["name"]: s for s in runs["one"]["mixture"]["sources"]}
    assert mix["a"]["documents_in"] == 60 and mix["a"]["documents"] == 120
    assert 15 <= mix["b"]["documents"] <= 45 and mix["b"]["documents_in"] == 60
    assert mix["a"]["tokens"] == 2 * mix["a"]["tokens_in"]
    assert mix["a"]["bytes"] == Path(a).stat().st_size and mix["a"]["rate"] == 2.0
    # every copy reached instance creation: training + eval documents = the sampled documents
    split = runs["one"]["split"]
    assert split["train_documents"] + split["eval_documents"] == mix["a"]["documents"] + mix["b"]["documents"]
    # each shard set counts its own instances per source: every instance and every word piece once
    eval_manifest = json.loads((tmp_path / "one" / "eval" / "manifest.json").read_text())
    for manifest in (runs["one"], eval_manifest):
        rows, stats = manifest["mixture"]["sources"], manifest["statistics"]
        assert sum(r["instances"] for r in rows) == stats["instances"] > 0
        assert sum(r["instance_tokens"] for r in rows) + 3 * stats["instances"] == stats["tokens"]  # [CLS], 2 [SEP]
        assert sum(r["instance_share"] for r in rows) == pytest.approx(1.0, abs=1e-5)
    assert mix["a"]["instance_share"] > 0.7  # 120 of 150 documents
    # inspect prints per source the asked share beside the realised ones (word pieces, instances, their pieces)
    shown = format_statistics(runs["one"])
    a = mix["a"]
    realised = [a["asked_token_share"], a["token_share"], a["instance_share"], a["instance_token_share"]]
    assert f"{a['instances']:,} instances" in shown
    assert "share {} -> {}, {}, {}".format(*(f"{100 * x:.1f}%" for x in realised)) in shown


@pytest.mark.parametrize("objective", ["sop", "none"])
def test_instances_are_counted_per_source_under_every_objective(corpus, tmp_path, objective):
    a, b = corpus["files"]
    config = _config(
        corpus,
        tmp_path / "out",
        sources=(Source("a", (a,), 1.0), Source("b", (b,), 0.25)),
        instance=InstanceConfig(
            max_seq_length=32, dupe_factor=2, objective=objective, mlm=MaskingConfig(max_predictions_per_seq=5)
        ),
    )
    manifest = run_make_shards(config, ONE_WORKER)
    rows, stats = manifest["mixture"]["sources"], manifest["statistics"]
    specials = 3 if objective == "sop" else 2  # objective none: [CLS] row [SEP], with [SEP]s between documents
    separators = stats.get("document_separators", 0)
    assert sum(r["instances"] for r in rows) == stats["instances"] > 0
    assert sum(r["instance_tokens"] for r in rows) + specials * stats["instances"] + separators == stats["tokens"]
    # the word pieces of the instances follow the sampled documents' (b: a quarter of its word pieces)
    for r in rows:
        assert r["instance_token_share"] == pytest.approx(r["token_share"], abs=0.03)


# ------------------------------------------------------------------------------------------ MinHash


def test_each_document_is_dropped_when_an_earlier_one_is_a_near_copy():
    base = np.arange(128, dtype=np.uint32)
    near = base.copy()
    near[:10] += 1000  # estimated Jaccard 118/128
    far = base + 5000
    members = [(0, 2, near.tobytes()), (0, 0, base.tobytes()), (1, 0, far.tobytes()), (0, 5, near.tobytes())]
    assert list(near_dedup.near_duplicates(members, 0.8)) == [((0, 2), (0, 0)), ((0, 5), (0, 0))]
    assert list(near_dedup.near_duplicates(members, 0.95)) == [((0, 5), (0, 2))]


def test_shingles_and_signatures_are_stable():
    assert near_dedup.shingles("a b c", 5) == [b"a b c"]
    assert near_dedup.shingles("a b c d", 2) == [b"a b", b"b c", b"c d"]
    assert near_dedup.shingles("", 5) == []
    code = (
        "from bertprep.pipeline.beam.near_dedup import _Hasher; "
        "print(_Hasher().signature([b'x y', b'y z']).tobytes().hex())"
    )
    here = near_dedup._Hasher().signature([b"x y", b"y z"]).tobytes().hex()
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == here


def _near_corpus(root: Path) -> tuple[list[str], set[tuple[int, int]]]:
    rng = np.random.default_rng(1)
    docs = [[" ".join(rng.choice(WORDS, 40)) for _ in range(3)] for _ in range(12)]
    copy = [s.split() for s in docs[3]]
    copy[1][5] = "w399"  # one word changed of 120: 3-gram Jaccard about 0.95 (5-grams: 0.92)
    a = docs[:6] + [[" ".join(s) for s in copy]]  # the copy after its original: dropped
    b = [docs[3]] + docs[6:]  # an exact copy in the next file: dropped too
    files = []
    for name, ds in (("a.txt", a), ("b.txt", b)):
        (root / name).write_text("\n\n".join("\n".join(d) for d in ds) + "\n")
        files.append(str(root / name))
    return files, {(0, 6), (1, 0)}


def test_near_dedup_finds_the_near_copies_and_keeps_the_first(tmp_path):
    files, dropped = _near_corpus(tmp_path)
    config = ShardsConfig(inputs=tuple(files), vocab="v", output_dir="o", input_format="bert", dedup="minhash")
    with BeamTestPipeline(argv=ONE_WORKER) as p:
        out = p | beam.Create(list(enumerate(files))) | near_dedup.NearDedup(config)
        expected = [(f, path, tuple(sorted(o for ff, o in dropped if ff == f))) for f, path in enumerate(files)]
        assert_that(out["files"], equal_to(expected))


@pytest.mark.parametrize("scope", ["global", "file"])
def test_minhash_run_counts_in_the_manifest(corpus, tmp_path, scope):
    files, dropped = _near_corpus(tmp_path)
    config = _config(corpus, tmp_path / "out", inputs=tuple(files), dedup="minhash", pairing_scope=scope)
    manifest = run_make_shards(config, ONE_WORKER)
    assert manifest["dedup"]["documents_dropped"] == len(dropped) == 2
    assert manifest["dedup"]["duplicate_groups"] == 1  # both are copies of document (0, 3)
    assert manifest["dedup"]["lsh_bands"] * manifest["dedup"]["lsh_rows"] <= near_dedup.NUM_PERM
    assert manifest["statistics"]["documents"]["skipped"]["duplicate"] == 2


# ------------------------------------------------------------------------------------------ decontamination


def test_evaluation_texts_of_the_shared_formats(shared_data):
    fmt, texts = decontamination.evaluation_texts(str(shared_data / "squad" / "dev-v1.1.json"))
    assert fmt == "squad" and len(texts) == 2067 + 10570
    fmt, texts = decontamination.evaluation_texts(str(shared_data / "glue" / "MRPC" / "dev.tsv"))
    assert fmt == "glue-tsv" and len(texts) == 2 * 408 and not any(t.startswith("#1") for t in texts)
    fmt, texts = decontamination.evaluation_texts(str(shared_data / "glue" / "SST-2" / "dev.tsv"))
    assert fmt == "glue-tsv" and len(texts) == 872
    fmt, texts = decontamination.evaluation_texts(str(shared_data / "swag" / "val.head11.csv"))
    assert fmt == "swag-csv" and len(texts) == 11 * 6


def test_normalisation_matches_across_punctuation_and_case():
    assert decontamination.normalized_words("It's  the FILM's best—moment!") == "it s the film s best moment".split()
    table = {"e": decontamination.ngram_table_from_texts(["one two three four five six seven eight nine ten"], 13)}
    hits, cut = decontamination.contaminated_sentences(
        ["Intro here.", "One, two three four five six seven eight nine TEN."], table
    )
    assert hits == {"e": 1} and cut == {1}


def _planted(shared_data: Path, root: Path) -> tuple[str, list[str], int]:
    """30 clean Wikipedia documents (the JSON dump, no SQuAD article) and 6 planted with SQuAD contexts,
    questions (>= 8 words) and MRPC sentences, in the BERT format."""
    import csv

    squad = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())
    contexts = [p["context"] for a in squad["data"] for p in a["paragraphs"]]
    questions = [qa["question"] for a in squad["data"] for p in a["paragraphs"] for qa in p["qas"]]
    questions = [q for q in questions if len(q.split()) >= 8]
    with open(shared_data / "glue" / "MRPC" / "dev.tsv", encoding="utf-8-sig") as f:
        mrpc = [row[3] for row in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]]
    lines = (shared_data / "wikipedia" / "wikiextractor-json" / "wiki_00").read_text().splitlines()
    docs = [[s for s in json.loads(line)["text"].split("\n") if s.strip()][:8] for line in lines[:30]]
    plants = [contexts[5], questions[40], mrpc[7], contexts[900], questions[2000], mrpc[300]]
    for k, text in enumerate(plants):
        docs.insert(5 * k + 2, ["A clean opening sentence.", text, "A clean closing sentence."])
    path = root / "planted.txt"
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    evals = [str(shared_data / "squad" / "dev-v1.1.json"), str(shared_data / "glue" / "MRPC" / "dev.tsv")]
    return str(path), evals, len(plants)


@pytest.fixture(scope="module")
def planted_corpus(shared_data, tmp_path_factory) -> tuple[str, list[str], int]:
    """:func:`_planted`, written once for the module's tests (read only)."""
    return _planted(shared_data, tmp_path_factory.mktemp("planted"))


@pytest.mark.parametrize("scope", ["global", "file"])
@pytest.mark.parametrize("mode", ["drop", "cut"])
@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_every_planted_document_is_caught_and_no_clean_one(shared_data, corpus, planted_corpus, tmp_path, mode, scope):
    path, evals, planted = planted_corpus
    config = _config(
        corpus,
        tmp_path / "out",
        inputs=(path,),
        vocab=str(shared_data / "vocab" / "bert-base-uncased-vocab.txt"),
        decontaminate=tuple(evals),
        decontaminate_mode=mode,
        pairing_scope=scope,
    )
    manifest = run_make_shards(config, ONE_WORKER)
    d = manifest["decontamination"]
    assert d["documents_matched"] == planted
    per_file = {f["path"]: f["documents_matched"] for f in d["files"]}
    assert per_file == {evals[0]: 4, evals[1]: 2}
    if mode == "drop":
        assert d["documents_dropped"] == planted and manifest["statistics"]["documents"]["skipped"]["contaminated"] == 6
    else:  # only the planted sentence goes; the clean sentences around it stay
        assert d["documents_dropped"] == 0 and d["sentences_cut"] == planted


@pytest.mark.slow  # ~7 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_file_scope_decontaminates_both_sides_of_a_split_as_the_global_scope(
    shared_data, corpus, planted_corpus, tmp_path
):
    path, evals, planted = planted_corpus
    manifests = {}
    for scope in ("global", "file"):
        config = _config(
            corpus,
            tmp_path / scope,
            inputs=(path,),
            vocab=str(shared_data / "vocab" / "bert-base-uncased-vocab.txt"),
            decontaminate=tuple(evals),
            pairing_scope=scope,
            eval_fraction=0.3,
        )
        run_make_shards(config, ONE_WORKER)
        manifests[scope] = [json.loads((tmp_path / scope / sub / "manifest.json").read_text()) for sub in (".", "eval")]
    for train, held_out in manifests.values():
        assert train["decontamination"] == held_out["decontamination"]  # counted once, recorded in both
        assert train["decontamination"]["documents_dropped"] == planted
        total = train["split"]["train_documents"] + train["split"]["eval_documents"]
        assert total == 30  # the clean documents, on either side
    assert manifests["global"][0]["decontamination"] == manifests["file"][0]["decontamination"]
