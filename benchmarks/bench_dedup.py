"""``--dedup minhash`` against ``--dedup exact``: precision and recall on planted near-copies, and the cost.

Corpus (``plant_near_copies.py``): the 241 shared Wikipedia featured articles in the BERT format plus 80
edited copies of some of them (word drops, insertions and adjacent swaps at 1%, 3%, 5% and 10% of the words,
20 each), shuffled, followed by the 424 WikiExtractor JSON articles (real documents with no planted copy:
more chances for a false positive). For each setting the script

1. computes each planted pair's *true* Jaccard similarity of word n-gram sets (the pipeline's normalization,
   ``heldout.normalized_text``, and shingles, ``near_dedup.shingles``);
2. runs the real step (``near_dedup.NearDedup``, the transform make-shards runs first) in a Beam pipeline on
   the local runner and compares the documents it drops with the truth (the later document of each planted
   pair): per edit rate the pairs above the threshold and how many were caught (recall: what an LSH index
   promises, for pairs whose true Jaccard is >= the threshold), the pairs below it caught anyway (the
   estimate's noise), and the dropped documents that are no planted copy (false positives);
3. runs the real CLI (``bertprep make-shards``, ``--dupe-factor 1``, defaults otherwise) ``--repeats`` times
   per variant, in rotating order, and reports the median wall time: ``--dedup none``, ``exact`` and each
   ``minhash`` setting.

A setting is ``THRESHOLD:NGRAM``, or ``THRESHOLD:NGRAM:balanced`` for datasketch's balanced LSH weights
(the bands used before ``near_dedup.LSH_WEIGHTS``). Reproduce with the command printed at the top, e.g.::

    python benchmarks/bench_dedup.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plant_near_copies import plant

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
VOCAB = str(DATA / "vocab" / "bert-base-uncased-vocab.txt")
JSON_ARTICLES = DATA / "wikipedia" / "wikiextractor-json" / "wiki_00"


def planted_pairs(truth: list) -> dict[int, tuple[int, float]]:
    """Each planted pair's later document -> (its earlier document, the copy's edit rate)."""
    first: dict[int, int] = {}
    pairs = {}
    for ordinal, (kind, article, _) in enumerate(truth):
        if kind == "neg":
            continue
        if article in first:
            earlier = first[article]
            pairs[ordinal] = (earlier, max(truth[earlier][2], truth[ordinal][2]))
        else:
            first[article] = ordinal
    return pairs


def documents(corpus: Path) -> list[list[str]]:
    from bertprep.pipeline import readers

    return [d.sentences for d in readers.read_documents(str(corpus), "bert", stats=readers.ReaderStats())]


def true_jaccards(docs: list[list[str]], pairs: dict, ngram: int) -> dict[int, float]:
    from bertprep.core.normalization import bert_normalizer
    from bertprep.pipeline.beam import heldout, near_dedup

    normalize = bert_normalizer(True, None).normalize_str

    def grams(d: int) -> set[bytes]:
        return set(near_dedup.shingles(heldout.normalized_text(docs[d], normalize), ngram))

    out = {}
    for later, (earlier, _) in pairs.items():
        a, b = grams(earlier), grams(later)
        out[later] = len(a & b) / len(a | b)
    return out


def found_dropped(corpus: Path, threshold: float, ngram: int, balanced: bool) -> tuple[set[int], tuple[int, int]]:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam import near_dedup
    from bertprep.pipeline.config import InstanceConfig, ShardsConfig

    config = ShardsConfig(
        inputs=(str(corpus),),
        vocab=VOCAB,
        output_dir="unused",
        input_format="bert",
        instance=InstanceConfig(dupe_factor=1),
        dedup="minhash",
        dedup_threshold=threshold,
        dedup_ngram=ngram,
    )
    weights = near_dedup.LSH_WEIGHTS
    near_dedup.LSH_WEIGHTS = (0.5, 0.5) if balanced else weights  # read when the step is built, in this process
    try:
        bands = near_dedup.lsh_bands(threshold)
        out = Path(tempfile.mkdtemp()) / "skips.json"
        options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
        with beam.Pipeline(options=options) as p:
            files = p | beam.Create([(0, str(corpus))])
            kept = (files | near_dedup.NearDedup(config))["files"]
            _ = kept | "Skips" >> beam.Map(lambda f: json.dumps(list(f[2]))) | "Save" >> beam.Map(out.write_text)
    finally:
        near_dedup.LSH_WEIGHTS = weights
    return set(json.loads(out.read_text())), bands


def time_cli(corpus: Path, args: list[str], work: Path) -> float:
    out = work / "out"
    cmd = [sys.executable, "-m", "bertprep.cli.main", "make-shards", "-q", "-i", str(corpus)]
    cmd += ["--input-format", "bert", "--vocab", VOCAB, "-o", str(out), "--overwrite", "--dupe-factor", "1", *args]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=80)
    parser.add_argument(
        "--settings",
        default="0.8:3,0.8:5,0.8:5:balanced",
        help="minhash THRESHOLD:NGRAM[:balanced] settings to evaluate (comma-separated); the first is timed "
        "as the default",
    )
    args = parser.parse_args()
    print("# reproduce:", shlex.join([sys.executable, *sys.argv]))
    work = Path(tempfile.mkdtemp(prefix="bench_dedup_"))
    corpus, truth_file = plant(work / "corpus", args.copies)
    truth = json.loads(truth_file.read_text())
    # real articles with no planted copy after the planted set
    with open(corpus, "a", encoding="utf-8") as f, open(JSON_ARTICLES, encoding="utf-8") as articles:
        for line in articles:
            paragraphs = [s for s in json.loads(line)["text"].split("\n") if s.strip()]
            if paragraphs:
                f.write("\n" + "\n".join(paragraphs) + "\n")
                truth.append(["neg", -1, 0.0])
    docs = documents(corpus)
    assert len(docs) == len(truth), (len(docs), len(truth))
    pairs = planted_pairs(truth)
    settings = [s.split(":") for s in args.settings.split(",")]
    print(f"corpus: {corpus.stat().st_size / 1e6:.1f} MB, {len(docs)} documents, {len(pairs)} planted pairs")
    print(
        "\n| threshold | n-gram | bands x rows | edit rate | true Jaccard (min-median-max) | above threshold "
        "| caught above (recall) | caught below |\n|---:|---:|---|---:|---|---:|---:|---:|"
    )
    totals = []
    for setting in settings:
        threshold, ngram, balanced = float(setting[0]), int(setting[1]), setting[2:] == ["balanced"]
        jaccard = true_jaccards(docs, pairs, ngram)
        found, (bands, rows) = found_dropped(corpus, threshold, ngram, balanced)
        label = f"{bands} x {rows}" + (" (balanced)" if balanced else "")
        for rate in sorted({r for _, r in pairs.values()}):
            ids = [o for o, (_, r) in pairs.items() if r == rate]
            js = sorted(jaccard[o] for o in ids)
            above = [o for o in ids if jaccard[o] >= threshold]
            caught = len([o for o in above if o in found])
            recall = f"{caught}/{len(above)}" + (f" ({caught / len(above):.2f})" if above else "")
            below = len([o for o in ids if o not in above and o in found])
            print(
                f"| {threshold} | {ngram} | {label} | {rate:.0%} | {js[0]:.2f}-{statistics.median(js):.2f}-"
                f"{js[-1]:.2f} | {len(above)}/{len(ids)} | {recall} | {below} |"
            )
        above = [o for o in pairs if jaccard[o] >= threshold]
        false_positives = len(found - set(pairs))
        precision = (len(found) - false_positives) / len(found) if found else float("nan")
        recall_above = len([o for o in above if o in found]) / max(1, len(above))
        recall_all = len(found & set(pairs)) / len(pairs)
        totals.append(
            f"| {threshold} | {ngram} | {label} | {len(found)} | {false_positives} | {precision:.3f} | "
            f"{recall_above:.3f} | {recall_all:.3f} |"
        )
    print(
        "\n| threshold | n-gram | bands x rows | dropped | false positives | precision | recall above threshold "
        "| recall of all planted |\n|---:|---:|---|---:|---:|---:|---:|---:|"
    )
    print("\n".join(totals))
    variants = {"none": [], "exact": ["--dedup", "exact"]}
    for setting in settings:
        if setting[2:] != ["balanced"]:  # the balanced bands are no option of the CLI
            variants[f"minhash {setting[0]}/{setting[1]}"] = ["--dedup", "minhash"] + [
                "--dedup-threshold",
                setting[0],
                "--dedup-ngram",
                setting[1],
            ]
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(time_cli(corpus, variants[name], work))
    print("\n| --dedup | wall s (median) | runs |")
    print("|---|---:|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.1f} | {', '.join(f'{t:.1f}' for t in ts)} |")


if __name__ == "__main__":
    main()
