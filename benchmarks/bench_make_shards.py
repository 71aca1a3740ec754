"""make-shards speed and memory, side by side with a single-process baseline and bare tokenization.

Builds a corpus in the original BERT format (one sentence per line, blank line between documents) from
the shared data (241 Wikipedia featured articles + 12 Project Gutenberg books = 253 documents, 16 MB),
optionally repeated N times, then runs, each in a fresh process and --repeats times:

- ``tokenize``: bare tokenization of every line with Hugging Face ``tokenizers`` (``encode_batch_fast``,
  the library's own threads): the practical floor;
- ``tokenize-encoder``: the same with bertprep's ``SentenceEncoder`` (the same ids; pure-ASCII sentences
  skip the Rust normalizer), the tokenization make-shards does;
- ``beam-startup``: a trivial pipeline (4 elements, a Reshuffle) on make-shards' local runner and options
  (Python and Beam imports, starting the worker processes, tear-down): the fixed cost of any run;
- ``baseline``: a faithful single-process implementation of the original generator (bertprep's one-bucket
  path without Beam: read, tokenize, ``create_training_instances`` of ``tests/reference/`` with
  ``random.Random(seed)``, write one Arrow file) -- the original algorithm on one core, minus TensorFlow;
- ``make-shards`` variants through the real CLI (Beam, local runner, all cores).

Reports wall time (median), MB/s, instances/s and peak memory (RSS summed over the process tree, sampled
every 20 ms), and the ratios. Reproduce with the command printed at the top of the output, e.g.::

    python benchmarks/bench_make_shards.py --repeats 3
    python benchmarks/bench_make_shards.py --repeats 5 --memory-curve 1,4,8 --curve-repeats 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / "_work"
PYTHON = sys.executable
BERTPREP = [PYTHON, "-m", "bertprep.cli.main"]


def data_dir() -> Path:
    return Path(os.environ.get("BERTPREP_DATA", REPO.parent / "shared" / "data")).resolve()


def build_corpus(scale: int, files: int) -> Path:
    """``scale`` copies of the 16 MB corpus split over ``files * scale`` BERT-format files (cached)."""
    out = WORK / f"corpus-{scale}x"
    marker = out / ".complete"
    if marker.exists():
        return out
    from bertprep.pipeline import readers

    base = WORK / "corpus-1x.txt"
    if not base.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        sources = readers.expand_inputs([str(data_dir() / "wikipedia" / "wikiextractor-featured"),
                                         str(data_dir() / "gutenberg")])
        tmp = base.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for path in sources:
                for doc in readers.read_documents(path, "auto"):
                    f.write("\n".join(s.replace("\n", " ") for s in doc.sentences) + "\n\n")
        tmp.rename(base)
    docs = base.read_text(encoding="utf-8").split("\n\n")
    docs = [d for d in docs if d.strip()]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    n_files = files * scale
    buckets = [[] for _ in range(n_files)]
    for copy in range(scale):
        for k, doc in enumerate(docs):
            buckets[(copy * len(docs) + k) % n_files].append(doc)
    for i, part in enumerate(buckets):
        (out / f"part-{i:04d}.txt").write_text("\n\n".join(part) + "\n", encoding="utf-8")
    marker.touch()
    return out


def measure(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Run ``cmd``; return (wall seconds, peak RSS of the process tree in MB, stdout+stderr)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    root = psutil.Process(proc.pid)
    peak = 0
    output_chunks = []
    while proc.poll() is None:
        try:
            procs = [root] + root.children(recursive=True)
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - start
    out, _ = proc.communicate()
    output_chunks.append(out or "")
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{''.join(output_chunks)[-3000:]}")
    return wall, peak / 2**20, "".join(output_chunks)


TOKENIZE_SNIPPET = textwrap.dedent("""
    import glob, sys
    from bertprep.pipeline.tokenization import load_vocab, build_tokenizer
    tok = build_tokenizer(load_vocab(sys.argv[1]), True)
    n = 0
    for path in sorted(glob.glob(sys.argv[2] + "/*.txt")):
        lines = [l.strip() for l in open(path, encoding="utf-8") if l.strip()]
        n += sum(len(e.ids) for e in tok.encode_batch_fast(lines, add_special_tokens=False))
    print("word pieces", n)
""")

ENCODER_SNIPPET = textwrap.dedent("""
    import glob, sys
    from bertprep.pipeline.tokenization import load_vocab, SentenceEncoder
    encoder = SentenceEncoder(load_vocab(sys.argv[1]), True)
    n = 0
    for path in sorted(glob.glob(sys.argv[2] + "/*.txt")):
        lines = [l.strip() for l in open(path, encoding="utf-8") if l.strip()]
        n += sum(len(ids) for ids in encoder.encode(lines))
    print("word pieces", n)
""")

STARTUP_SNIPPET = textwrap.dedent("""
    import apache_beam as beam
    from bertprep.pipeline.run import _local_runner, default_pipeline_options
    options = default_pipeline_options([])
    with beam.Pipeline(runner=_local_runner(options), options=options) as p:
        p | beam.Create(list(range(4))) | beam.Reshuffle() | beam.Map(lambda x: x + 1)
""")

BASELINE_SNIPPET = textwrap.dedent("""
    import glob, random, sys
    import pyarrow as pa
    sys.path.insert(0, sys.argv[5])  # tests/: the list-based reference algorithm lives in tests/reference/
    from bertprep.pipeline import readers
    from bertprep.pipeline.config import InstanceConfig
    from bertprep.pipeline.instances import VocabIds
    from reference.instances import create_training_instances, instances_to_table
    from bertprep.pipeline.tokenization import SentenceEncoder, load_vocab
    vocab = load_vocab(sys.argv[1]); encoder = SentenceEncoder(vocab, True)
    docs = []
    for path in sorted(glob.glob(sys.argv[2] + "/*.txt")):
        docs += encoder.encode_documents(d.sentences for d in readers.read_documents(path, "bert"))
    config = InstanceConfig(dupe_factor=int(sys.argv[4]))
    instances = create_training_instances(docs, config, VocabIds(vocab), random.Random(config.random_seed))
    table = instances_to_table(instances, vocab.size)
    with pa.OSFile(sys.argv[3], "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    print("instances", table.num_rows)
""")


def corpus_mb(corpus: Path) -> float:
    return sum(p.stat().st_size for p in corpus.glob("*.txt")) / 1e6


def run_variants(corpus: Path, vocab: str, dupe: int, repeats: int, variants: list[str],
                 bucket_size: int) -> list[dict]:
    mb = corpus_mb(corpus)
    results = []
    for name in variants:
        walls, peaks, instances = [], [], None
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(dir=WORK) as tmp:
                if name == "tokenize":
                    cmd = [PYTHON, "-c", TOKENIZE_SNIPPET, vocab, str(corpus)]
                elif name == "tokenize-encoder":
                    cmd = [PYTHON, "-c", ENCODER_SNIPPET, vocab, str(corpus)]
                elif name == "beam-startup":
                    cmd = [PYTHON, "-c", STARTUP_SNIPPET]
                elif name == "baseline":
                    cmd = [PYTHON, "-c", BASELINE_SNIPPET, vocab, str(corpus), f"{tmp}/out.arrow", str(dupe),
                           str(REPO / "tests")]
                else:
                    sampling = "fast" if "fast" in name else "exact"
                    scope = "file" if "file" in name else "global"
                    cmd = BERTPREP + ["make-shards", "-i", str(corpus), "--vocab", vocab, "-o", f"{tmp}/shards",
                                      "--input-format", "bert", "--dupe-factor", str(dupe), "--sampling", sampling,
                                      "--pairing-scope", scope, "--bucket-size", str(bucket_size), "-q"]
                wall, peak, out = measure(cmd)
                walls.append(wall)
                peaks.append(peak)
                for line in out.splitlines():
                    if line.startswith("instances "):
                        instances = int(line.split()[1])
                    if line.startswith("Wrote "):
                        instances = int(line.split()[1].replace(",", ""))
        wall = statistics.median(walls)
        results.append({"name": name, "wall": wall, "walls": walls, "peak_mb": max(peaks), "mb": mb,
                        "instances": instances})
        print(f"  {name:<24} median {wall:6.2f} s  runs {' '.join(f'{w:.2f}' for w in walls)}  "
              f"peak {max(peaks):7.0f} MB", flush=True)
    return results


def table(results: list[dict], baseline: str = "baseline", floor: str = "tokenize") -> str:
    by = {r["name"]: r for r in results}
    lines = ["| run | wall (median) | MB/s | instances/s | peak RSS | vs baseline | vs tokenize |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        inst = f"{r['instances'] / r['wall']:,.0f}" if r["instances"] else "-"
        vs_base = f"{by[baseline]['wall'] / r['wall']:.2f}x faster" if baseline in by else "-"
        vs_tok = f"{r['wall'] / by[floor]['wall']:.2f}x" if floor in by else "-"
        lines.append(f"| {r['name']} | {r['wall']:.2f} s | {r['mb'] / r['wall']:.2f} | {inst} | "
                     f"{r['peak_mb']:,.0f} MB | {vs_base} | {vs_tok} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument("--bucket-size", type=int, default=64,
                        help="make-shards --bucket-size (64: four buckets of the 253 documents, so both cores work)")
    parser.add_argument("--files", type=int, default=4, help="files per copy of the corpus")
    parser.add_argument("--variants", default="tokenize,tokenize-encoder,beam-startup,baseline,"
                                                  "make-shards exact,make-shards fast")
    parser.add_argument("--memory-curve", default="", help="e.g. 1,4,8: peak memory of make-shards at these scales")
    parser.add_argument("--curve-variants", default="make-shards exact file,make-shards fast file,make-shards exact,"
                                                    "make-shards fast")
    parser.add_argument("--curve-repeats", type=int, default=0, help="repeats per memory-curve run (0 = --repeats)")
    args = parser.parse_args()
    vocab = str(data_dir() / "vocab" / "bert-base-uncased-vocab.txt")
    print("command: python benchmarks/bench_make_shards.py " + " ".join(sys.argv[1:]))
    print(f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
          f"python {sys.version.split()[0]}")
    WORK.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(1, args.files)
    print(f"corpus: {corpus} ({corpus_mb(corpus):.1f} MB, BERT format), dupe_factor {args.dupe_factor}, "
          f"seq 128, uncased Google vocab, bucket size {args.bucket_size}")
    results = run_variants(corpus, vocab, args.dupe_factor, args.repeats, args.variants.split(","), args.bucket_size)
    print()
    print(table(results))
    if args.memory_curve:
        print("\nmemory curve (peak RSS of the whole process tree):")
        rows = []
        for scale in [int(s) for s in args.memory_curve.split(",")]:
            corpus_k = build_corpus(scale, args.files)
            print(f" scale {scale}x: {corpus_mb(corpus_k):.0f} MB")
            res = run_variants(corpus_k, vocab, args.dupe_factor, args.curve_repeats or args.repeats,
                               args.curve_variants.split(","), args.bucket_size)
            rows.extend((scale, r) for r in res)
        print("\n| variant | " + " | ".join(f"{s}x" for s in sorted({s for s, _ in rows})) + " |")
        print("|---|" + "---:|" * len({s for s, _ in rows}))
        for variant in args.curve_variants.split(","):
            cells = [f"{r['peak_mb']:,.0f} MB / {r['wall']:.1f} s" for s, r in rows if r["name"] == variant]
            print(f"| {variant} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
