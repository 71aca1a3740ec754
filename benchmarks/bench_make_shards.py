"""make-shards speed and memory, side by side with Google's original generator or a single-process baseline.

Builds a corpus in the original BERT format (one sentence per line, blank line between documents) from
the shared data (241 Wikipedia featured articles + 12 Project Gutenberg books = 253 documents, 16 MB),
optionally repeated N times, then runs every variant once per round, each in a fresh process, for
``--repeats`` rounds, rotating the order between rounds (so a change in the machine's load falls on every
variant alike). Variants:

- ``original`` (with ``--original DIR``): Google's ``create_pretraining_data.py`` from DIR (your own copy,
  with its ``tokenization.py``; nothing of it is in this repository), run with the stand-in ``tensorflow``
  of ``benchmarks/tf_standin`` on its ``PYTHONPATH`` (TFRecords replaced by JSON lines), on the same files,
  vocab and ``--dupe_factor``, the other flags at their defaults;
- ``make-shards`` (default options: token-sized buckets, ``--sampling auto``, i.e. fast with several buckets),
  ``make-shards file`` (``--pairing-scope file``), ``make-shards exact`` (``--sampling exact``, the default
  before ``auto``), ``make-shards fast``, ``make-shards fast file``, ``make-shards one-bucket``
  (``--bucket-size 0``, exact sampling): the real CLI, local runner;
- ``tokenize``: bare tokenization of every line with Hugging Face ``tokenizers`` (``encode_batch_fast``,
  the library's own threads); ``tokenize-encoder``: the same with bertprep's ``SentenceEncoder``;
- ``beam-startup``: a trivial pipeline (4 elements, a Reshuffle) on make-shards' local runner (Beam's own
  worker processes, no warm pool): Beam's fixed cost;
- ``baseline``: a faithful single-process implementation of the original generator (read, tokenize, the
  list-based reference ``create_training_instances`` of ``tests/reference/``, one Arrow file).

With ``--original DIR`` the default variants are ``original,make-shards`` at every ``--sizes`` scale and the
script ends with a markdown table of the medians and their ratio; without it, the variants are the
baseline, the tokenization floors, Beam's start-up and make-shards. Reports wall time (median), MB/s,
instances/s and peak memory (RSS summed over the process tree, sampled every 20 ms; forked workers' shared
pages count once per process), and the load average. Reproduce with the command printed at the top, e.g.::

    python benchmarks/bench_make_shards.py --original /tmp/orig --sizes 1,8 --repeats 3
    python benchmarks/bench_make_shards.py --repeats 3 --memory-curve 1,8 --curve-repeats 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
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
    marker = out / ".complete-v2"  # v2: every file ends with a blank line (see below)
    if marker.exists():
        return out
    from bertprep.pipeline import readers

    base = WORK / "corpus-1x.txt"
    if not base.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        sources = readers.expand_inputs(
            [str(data_dir() / "wikipedia" / "wikiextractor-featured"), str(data_dir() / "gutenberg")]
        )
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
        # a blank line at the end of every file: the original reads its input files as one stream, so a file
        # without one would run its last document into the next file's first (make-shards never does)
        (out / f"part-{i:04d}.txt").write_text("\n\n".join(part) + "\n\n", encoding="utf-8")
    marker.touch()
    return out


def measure(cmd: list[str], env: dict | None = None) -> tuple[float, float, str, float]:
    """Run ``cmd``; return (wall seconds, peak RSS of the process tree in MB, stdout+stderr, CPU seconds).

    The output goes to a temporary file (a pipe nobody reads while the process runs could fill and stall it);
    the tree's RSS is sampled every 20 ms. CPU seconds: user + system time of the process and every
    descendant it waited for (``RUSAGE_CHILDREN`` before and after), which the machine's load changes much
    less than the wall time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as log_file:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
        root = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            try:
                rss = 0
                for p in [root] + root.children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        rss += p.memory_info().rss
                peak = max(peak, rss)
            except psutil.Error:
                pass
            time.sleep(0.02)
        wall = time.perf_counter() - start
        log_file.seek(0)
        out = log_file.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, peak / 2**20, out, cpu


TOKENIZE_SNIPPET = textwrap.dedent("""
    import glob, sys
    from bertprep.pipeline.text.tokenization import load_vocab, build_tokenizer
    tok = build_tokenizer(load_vocab(sys.argv[1]), True)
    n = 0
    for path in sorted(glob.glob(sys.argv[2] + "/*.txt")):
        lines = [l.strip() for l in open(path, encoding="utf-8") if l.strip()]
        n += sum(len(e.ids) for e in tok.encode_batch_fast(lines, add_special_tokens=False))
    print("word pieces", n)
""")

ENCODER_SNIPPET = textwrap.dedent("""
    import glob, sys
    from bertprep.pipeline.text.tokenization import load_vocab, SentenceEncoder
    encoder = SentenceEncoder(load_vocab(sys.argv[1]), True)
    n = 0
    for path in sorted(glob.glob(sys.argv[2] + "/*.txt")):
        lines = [l.strip() for l in open(path, encoding="utf-8") if l.strip()]
        n += sum(len(ids) for ids in encoder.encode(lines))
    print("word pieces", n)
""")

STARTUP_SNIPPET = textwrap.dedent("""
    import apache_beam as beam
    from bertprep.pipeline.beam.run import _local_runner, default_pipeline_options
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
    from bertprep.pipeline.instances.common import VocabIds
    from reference.instances import create_training_instances, instances_to_table
    from bertprep.pipeline.text.tokenization import SentenceEncoder, load_vocab
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


#: make-shards variants: name -> options after the common ones (``--dupe-factor``, ``-q``, ...).
MAKE_SHARDS_VARIANTS = {
    "make-shards": [],  # default options (token-sized buckets, --sampling auto: fast with several buckets)
    "make-shards file": ["--pairing-scope", "file"],
    "make-shards exact": ["--sampling", "exact"],  # the default before --sampling auto
    "make-shards fast": ["--sampling", "fast"],
    "make-shards fast file": ["--sampling", "fast", "--pairing-scope", "file"],
    "make-shards one-bucket": ["--bucket-size", "0"],
}


def original_files(original: Path) -> Path:
    """Check that ``original`` holds the user's copy of the original generator."""
    for name in ("create_pretraining_data.py", "tokenization.py"):
        if not (original / name).is_file():
            raise SystemExit(
                f"--original {original}: no {name} there; put your copy of google-research/bert's "
                "create_pretraining_data.py and tokenization.py in that directory"
            )
    return original / "create_pretraining_data.py"


def command_for(
    name: str, corpus: Path, vocab: str, dupe: int, tmp: str, extra: list[str], original: Path | None
) -> tuple[list[str], dict | None]:
    """The command (and environment) of one run of variant ``name``."""
    if name == "original":
        files = ",".join(str(p) for p in sorted(corpus.glob("*.txt")))
        env = dict(os.environ, PYTHONPATH=str(HERE / "tf_standin"))  # the stand-in tensorflow, for this run only
        return [
            PYTHON,
            str(original_files(original)),
            f"--input_file={files}",
            f"--output_file={tmp}/out.jsonl",
            f"--vocab_file={vocab}",
            f"--dupe_factor={dupe}",
        ], env
    if name == "tokenize":
        return [PYTHON, "-c", TOKENIZE_SNIPPET, vocab, str(corpus)], None
    if name == "tokenize-encoder":
        return [PYTHON, "-c", ENCODER_SNIPPET, vocab, str(corpus)], None
    if name == "beam-startup":
        return [PYTHON, "-c", STARTUP_SNIPPET], None
    if name == "baseline":
        return [
            PYTHON,
            "-c",
            BASELINE_SNIPPET,
            vocab,
            str(corpus),
            f"{tmp}/out.arrow",
            str(dupe),
            str(REPO / "tests"),
        ], None
    if name not in MAKE_SHARDS_VARIANTS:
        raise SystemExit(
            f"unknown variant {name!r}; known: original, tokenize, tokenize-encoder, beam-startup, "
            f"baseline, {', '.join(MAKE_SHARDS_VARIANTS)}"
        )
    return make_shards_command(corpus, vocab, f"{tmp}/shards", dupe, ["-q", *MAKE_SHARDS_VARIANTS[name], *extra]), None


def make_shards_command(corpus: Path, vocab: str, output: str, dupe: int, options: list[str]) -> list[str]:
    """``bertprep make-shards`` of the benchmark corpus (``--input-format bert``) into ``output``, then ``options``."""
    return BERTPREP + [
        "make-shards",
        "-i",
        str(corpus),
        "--vocab",
        vocab,
        "-o",
        output,
        "--input-format",
        "bert",
        "--dupe-factor",
        str(dupe),
        *options,
    ]


def instances_in(output: str) -> int | None:
    for line in output.splitlines():
        if line.startswith("instances "):
            return int(line.split()[1])
        if line.startswith("Wrote "):
            return int(line.split()[1].replace(",", ""))
        if "Wrote " in line and "total instances" in line:  # the original's last log line
            return int(line.split("Wrote ")[1].split()[0])
    return None


def run_variants(
    corpus: Path,
    vocab: str,
    dupe: int,
    repeats: int,
    variants: list[str],
    extra: list[str],
    original: Path | None = None,
) -> list[dict]:
    """``repeats`` rounds; each round runs every variant once, in an order that rotates between rounds (so a
    change in the machine's load falls on every variant alike). Returns one result per variant."""
    mb = corpus_mb(corpus)
    runs = {name: {"walls": [], "peaks": [], "cpus": [], "instances": None} for name in variants}
    for round_ in range(repeats):
        order = variants[round_ % len(variants) :] + variants[: round_ % len(variants)]
        for name in order:
            with tempfile.TemporaryDirectory(dir=WORK) as tmp:
                cmd, env = command_for(name, corpus, vocab, dupe, tmp, extra, original)
                wall, peak, out, cpu = measure(cmd, env)
            runs[name]["walls"].append(wall)
            runs[name]["cpus"].append(cpu)
            runs[name]["peaks"].append(peak)
            runs[name]["instances"] = instances_in(out) or runs[name]["instances"]
            print(
                f"  round {round_ + 1}: {name:<24} {wall:7.2f} s  CPU {cpu:7.2f} s  peak {peak:7.0f} MB  "
                f"(load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    results = []
    for name in variants:
        walls = runs[name]["walls"]
        results.append(
            {
                "name": name,
                "wall": statistics.median(walls),
                "walls": walls,
                "cpu": statistics.median(runs[name]["cpus"]),
                "peak_mb": max(runs[name]["peaks"]),
                "mb": mb,
                "instances": runs[name]["instances"],
            }
        )
    return results


def table(results: list[dict], baseline: str = "baseline", floor: str = "tokenize") -> str:
    by = {r["name"]: r for r in results}
    ref = "original" if "original" in by else baseline
    lines = [
        f"| run | wall (median) | runs | CPU (median) | MB/s | instances/s | peak RSS | {ref} / run | vs tokenize |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        inst = f"{r['instances'] / r['wall']:,.0f}" if r["instances"] else "-"
        vs_ref = f"{by[ref]['wall'] / r['wall']:.2f}x" if ref in by else "-"
        vs_tok = f"{r['wall'] / by[floor]['wall']:.2f}x" if floor in by else "-"
        runs = " ".join(f"{w:.1f}" for w in r["walls"])
        lines.append(
            f"| {r['name']} | {r['wall']:.2f} s | {runs} | {r['cpu']:.1f} s | {r['mb'] / r['wall']:.2f} | {inst} | "
            f"{r['peak_mb']:,.0f} MB | {vs_ref} | {vs_tok} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--original",
        type=Path,
        default=None,
        metavar="DIR",
        help="a directory with your copy of google-research/bert's create_pretraining_data.py and "
        "tokenization.py: run it (with the stand-in tensorflow of benchmarks/tf_standin) "
        "interleaved with make-shards on default options, at every --sizes scale",
    )
    parser.add_argument(
        "--sizes", default="1", help="with --original: copies of the 16 MB corpus to run at, e.g. 1,8 (16 and 128 MB)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds (each runs every variant once)")
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument(
        "--bucket-size",
        type=int,
        default=None,
        help="pass --bucket-size to every make-shards run (default: make-shards' default)",
    )
    parser.add_argument("--files", type=int, default=4, help="files per copy of the corpus")
    parser.add_argument(
        "--variants",
        default=None,
        help="comma-separated; default with --original: original,make-shards; without: "
        "tokenize,tokenize-encoder,beam-startup,baseline,make-shards,make-shards fast",
    )
    parser.add_argument("--memory-curve", default="", help="e.g. 1,8: peak memory of make-shards at these scales")
    parser.add_argument("--curve-variants", default="make-shards file,make-shards")
    parser.add_argument("--curve-repeats", type=int, default=0, help="rounds per memory-curve scale (0 = --repeats)")
    args = parser.parse_args()
    vocab = str(data_dir() / "vocab" / "bert-base-uncased-vocab.txt")
    extra = ["--bucket-size", str(args.bucket_size)] if args.bucket_size is not None else []
    if args.original is not None:
        original_files(args.original)
    variants = (
        args.variants.split(",")
        if args.variants
        else ["original", "make-shards"]
        if args.original
        else ["tokenize", "tokenize-encoder", "beam-startup", "baseline", "make-shards", "make-shards fast"]
    )
    print("command: python benchmarks/bench_make_shards.py " + " ".join(sys.argv[1:]))
    print(
        f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; "
        f"python {sys.version.split()[0]}; load average at start {os.getloadavg()[0]:.1f}"
    )
    WORK.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")] if args.original else [1]
    summary = []
    for scale in sizes:
        corpus = build_corpus(scale, args.files)
        print(
            f"corpus: {corpus} ({corpus_mb(corpus):.1f} MB, BERT format, {scale}x), dupe_factor "
            f"{args.dupe_factor}, seq 128, uncased Google vocab, make-shards options {extra or 'default'}"
        )
        results = run_variants(corpus, vocab, args.dupe_factor, args.repeats, variants, extra, args.original)
        print()
        print(table(results))
        print()
        summary.append((scale, corpus_mb(corpus), results))
    if args.original:
        print(
            f"side by side, {args.repeats} interleaved rounds per size (load average at the end "
            f"{os.getloadavg()[0]:.1f}; {os.cpu_count()} cores):\n"
        )
        print(
            "| corpus | original (median) | make-shards, default options (median) | ratio | "
            "CPU time original / make-shards | peak RSS original / make-shards |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for scale, mb, results in summary:
            by = {r["name"]: r for r in results}
            o, m = by["original"], by["make-shards"]
            print(
                f"| {mb:.0f} MB ({scale}x) | {o['wall']:.1f} s | {m['wall']:.2f} s | "
                f"**{o['wall'] / m['wall']:.1f}x** | "
                f"{o['cpu']:.1f} / {m['cpu']:.1f} s | {o['peak_mb']:,.0f} / {m['peak_mb']:,.0f} MB |"
            )
    if args.memory_curve:
        print("\nmemory curve (peak RSS of the whole process tree; median wall):")
        rows = []
        scales = [int(s) for s in args.memory_curve.split(",")]
        for scale in scales:
            corpus_k = build_corpus(scale, args.files)
            print(f" scale {scale}x: {corpus_mb(corpus_k):.0f} MB")
            res = run_variants(
                corpus_k,
                vocab,
                args.dupe_factor,
                args.curve_repeats or args.repeats,
                args.curve_variants.split(","),
                extra,
            )
            rows.extend((scale, r) for r in res)
        print(
            "\n| variant | "
            + " | ".join(f"{s}x ({corpus_mb(build_corpus(s, args.files)):.0f} MB)" for s in scales)
            + f" | {scales[-1]}x / {scales[0]}x memory |"
        )
        print("|---|" + "---:|" * (len(scales) + 1))
        for variant in args.curve_variants.split(","):
            cells = [r for s, r in rows if r["name"] == variant]
            growth = cells[-1]["peak_mb"] / cells[0]["peak_mb"]
            print(
                f"| {variant} | "
                + " | ".join(f"{r['peak_mb']:,.0f} MB / {r['wall']:.1f} s" for r in cells)
                + f" | {growth:.2f} |"
            )


if __name__ == "__main__":
    main()
