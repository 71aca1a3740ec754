"""``--dedup minhash`` against ``--dedup exact``: cost on the local runner, and precision/recall on planted
near-copies.

Corpus (``plant_near_copies.py``): the 241 shared Wikipedia featured articles in the BERT format plus 45
edited copies of some of them (word drops, insertions and adjacent swaps at 5%, 7.5% or 10%), shuffled.
For each setting the script

1. runs the real step (``near_dedup.NearDedup``, the same transform make-shards runs first) in a Beam
   pipeline on the local runner and compares the ordinals it drops with the truth (the later document of
   each planted pair): precision, recall;
2. runs the real CLI (``bertprep make-shards``, defaults otherwise, ``--dupe-factor 1``) ``--repeats`` times
   per variant, in rotating order, and reports the median wall time: ``--dedup none``, ``exact``,
   ``minhash`` (defaults: threshold 0.8, 5-grams) and the extra ``--settings``.

Reproduce with the command printed at the top, e.g.::

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

from plant_near_copies import plant  # noqa: E402

VOCAB = "/work/shared/data/vocab/bert-base-uncased-vocab.txt"


def truth_dropped(truth: list) -> set[int]:
    seen, dropped = set(), set()
    for ordinal, (_, article) in enumerate(truth):
        if article in seen:
            dropped.add(ordinal)
        seen.add(article)
    return dropped


def found_dropped(corpus: Path, threshold: float, ngram: int) -> set[int]:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.pipeline.beam.near_dedup import NearDedup
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
    out = Path(tempfile.mkdtemp()) / "skips.json"
    with beam.Pipeline(options=PipelineOptions(["--direct_num_workers=1"])) as p:
        files = p | beam.Create([(0, str(corpus))])
        kept = (files | NearDedup(config))["files"]
        _ = kept | "Skips" >> beam.Map(lambda f: json.dumps(list(f[2]))) | "Save" >> beam.Map(out.write_text)
    return set(json.loads(out.read_text()))


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
    parser.add_argument("--copies", type=int, default=45)
    parser.add_argument(
        "--settings",
        default="0.8:5,0.5:5,0.6:3",
        help="minhash THRESHOLD:NGRAM settings to evaluate (comma-separated)",
    )
    args = parser.parse_args()
    print("# reproduce:", shlex.join([sys.executable, *sys.argv]))
    work = Path(tempfile.mkdtemp(prefix="bench_dedup_"))
    corpus, truth_file = plant(work / "corpus", args.copies)
    truth = truth_dropped(json.loads(truth_file.read_text()))
    settings = [tuple(s.split(":")) for s in args.settings.split(",")]
    print(f"corpus: {corpus} ({corpus.stat().st_size / 1e6:.1f} MB), {len(json.loads(truth_file.read_text()))} docs")
    print("\n| threshold | n-gram | dropped | true pos. | precision | recall |")
    print("|---:|---:|---:|---:|---:|---:|")
    for threshold, ngram in settings:
        found = found_dropped(corpus, float(threshold), int(ngram))
        tp = len(found & truth)
        precision = tp / len(found) if found else float("nan")
        print(f"| {threshold} | {ngram} | {len(found)} | {tp} | {precision:.3f} | {tp / len(truth):.3f} |")
    variants = {"none": [], "exact": ["--dedup", "exact"]}
    for threshold, ngram in settings:
        variants[f"minhash {threshold}/{ngram}"] = [
            "--dedup",
            "minhash",
            "--dedup-threshold",
            threshold,
            "--dedup-ngram",
            ngram,
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
