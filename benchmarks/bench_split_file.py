"""Is one large input file read as fast as the same text in many files? (``readers.ranges``, ``--split-bytes``)

Builds, in a temporary folder, one WikiExtractor file of about ``--mb`` MB (the shared WikiExtractor files
concatenated over and over) and the same text, in the same order, as ``--parts`` files; runs
``make-shards`` with its defaults (local runner: as many worker processes as cores) on each, ``--runs``
times, each run a fresh process; prints the median wall time of each and, for the single file, the CPU
time of the run (the process and its workers) over its wall time. Goal: the single file within 1.15x of
the many files, and CPU/wall >= 1.7 on 2 cores (without ranges a single file is one worker's: about 1).
The shards of both inputs are checked to be the same (sha256; the documents' ids differ between them, so
only the single file's runs are compared with each other, and with a run with ``split_bytes=0``).

    python benchmarks/bench_split_file.py                  # 64 MB, 16 parts, 3 runs each
    python benchmarks/bench_split_file.py --mb 16 --runs 1 # quicker
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(os.environ.get("BERTPREP_DATA", Path(__file__).resolve().parent.parent.parent / "shared" / "data"))

RUN = """
import json, sys
from bertprep.pipeline.beam.run import run_make_shards
from bertprep.pipeline.config import ShardsConfig
kw = json.loads(sys.argv[1])
run_make_shards(ShardsConfig(**kw), [])
"""


def build(tmp: Path, mb: int, parts: int) -> tuple[Path, Path]:
    sources = sorted((DATA / "wikipedia" / "wikiextractor-featured" / "AA").glob("wiki_0*"))
    chunks = []
    total = 0
    while total < mb * 1_000_000:
        for source in sources:
            data = source.read_bytes()
            if not data.endswith(b"\n"):
                data += b"\n"
            chunks.append(data)
            total += len(data)
    single = tmp / "single" / "wiki_big"
    single.parent.mkdir(parents=True)
    single.write_bytes(b"".join(chunks))
    many = tmp / "many"
    many.mkdir()
    per_part = -(-len(chunks) // parts)
    for i in range(parts):
        (many / f"wiki_{i:02d}").write_bytes(b"".join(chunks[i * per_part : (i + 1) * per_part]))
    return single, many


def run(inputs: str, out: Path, vocab: Path, **extra) -> tuple[float, float, str]:
    """One make-shards run in a fresh process: (wall s, CPU s of it and its children, sha256 of the shards)."""
    kw = dict(inputs=[inputs], vocab=str(vocab), output_dir=str(out), overwrite=True, **extra)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(kw)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    if done.returncode:
        sys.exit(f"make-shards failed:\n{done.stderr.decode(errors='replace')[-3000:]}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    digest = hashlib.sha256()
    for path in sorted(out.rglob("*.arrow")) or sorted(p for p in out.rglob("*") if p.is_file()):
        if path.name != "manifest.json":
            digest.update(path.read_bytes())
    return wall, cpu, digest.hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=64, help="size of the single file, MB")
    parser.add_argument("--parts", type=int, default=16, help="files the same text is cut into")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--vocab", default=str(DATA / "vocab" / "bert-base-uncased-vocab.txt"))
    parser.add_argument("--check-whole", action="store_true", help="also run the single file with split_bytes=0")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]))
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="bench_split_") as tmp_name:
        tmp = Path(tmp_name)
        single, many = build(tmp, args.mb, args.parts)
        print(f"single file: {single.stat().st_size / 1e6:.1f} MB; {args.parts} files: same bytes")
        results: dict[str, list[tuple[float, float, str]]] = {"single": [], "many": []}
        for i in range(args.runs):  # interleaved, so that a change in the machine's load hits both
            results["single"].append(run(str(single), tmp / "out_single", Path(args.vocab)))
            results["many"].append(run(str(many), tmp / "out_many", Path(args.vocab)))
            print(f"run {i + 1}: single {results['single'][-1][0]:.1f} s, many {results['many'][-1][0]:.1f} s")
        walls = {k: statistics.median(r[0] for r in v) for k, v in results.items()}
        ratio = statistics.median(r[1] / r[0] for r in results["single"])
        print(
            f"wall, median of {args.runs}: single file {walls['single']:.1f} s, "
            f"{args.parts} files {walls['many']:.1f} s"
        )
        print(f"single / many: {walls['single'] / walls['many']:.2f}x (goal <= 1.15)")
        print(f"single file CPU / wall: {ratio:.2f} (goal >= 1.7 on 2 cores)")
        print(f"single file runs give the same shards: {len({r[2] for r in results['single']}) == 1}")
        if args.check_whole:
            whole = run(str(single), tmp / "out_whole", Path(args.vocab), split_bytes=0)
            print(
                f"read whole (split_bytes=0): {whole[0]:.1f} s, CPU/wall {whole[1] / whole[0]:.2f}, "
                f"same shards as in ranges: {whole[2] == results['single'][0][2]}"
            )
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
