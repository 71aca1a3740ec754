"""Static vs dynamic masking: storage and make-shards time, and what masking on the fly costs the loader.

``--masking static`` (the original) writes ``dupe_factor`` masked copies of every pair; ``--masking
dynamic`` writes each pair once, unmasked, and the trainer's loader masks every time it reads a row (the
same 15% / 80-10-10 rule, a seeded generator per loader stream). This script makes both from the
benchmark corpus (see ``bench_make_shards.py``) and reports shard bytes, make-shards wall time, and loader
instances/s in the training process for both directories::

    python benchmarks/bench_dynamic_masking.py --dupe-factor 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_make_shards import WORK, build_corpus, data_dir, make_shards_command, measure  # noqa: E402


def loader_rate(shard_dir: str, batches: int, repeats: int) -> float:
    """Median instances/s of the training loader in the training process (``bench_loader.py --workers 0``)."""
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "bench_loader.py"),
            "--shards",
            shard_dir,
            "--workers",
            "0",
            "--batches",
            str(batches),
            "--repeats",
            str(repeats),
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    line = next(x for x in out.stdout.splitlines() if x.strip().startswith("workers 0:"))
    return float(line.split(":")[1].split("instances/s")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dupe-factor", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    print("command: python benchmarks/bench_dynamic_masking.py " + " ".join(sys.argv[1:]))
    corpus = build_corpus(1, 4)
    vocab = str(data_dir() / "vocab" / "bert-base-uncased-vocab.txt")
    rows = []
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        for masking in ("static", "dynamic"):
            out = f"{tmp}/{masking}"
            walls = []
            for _ in range(args.repeats):
                options = ["--masking", masking, "--bucket-size", "64", "--overwrite", "-q"]
                wall, _peak, _ = measure(make_shards_command(corpus, vocab, out, args.dupe_factor, options))
                walls.append(wall)
            size = sum(p.stat().st_size for p in Path(out).glob("shard-*.arrow"))
            manifest = json.loads((Path(out) / "manifest.json").read_text())
            rate = loader_rate(out, args.batches, args.repeats)
            rows.append((masking, statistics.median(walls), size, manifest["statistics"]["instances"], rate))
            print(
                f"  {masking}: make-shards {statistics.median(walls):.1f} s, {size / 1e6:.0f} MB, "
                f"{manifest['statistics']['instances']:,} rows, loader {rate:,.0f} instances/s",
                flush=True,
            )
    print("\n| masking | make-shards wall | shard bytes | rows | loader (in-process) |")
    print("|---|---:|---:|---:|---:|")
    for masking, wall, size, n, rate in rows:
        print(f"| {masking} | {wall:.1f} s | {size / 1e6:.0f} MB | {n:,} | {rate:,.0f} instances/s |")
    s, d = rows
    print(
        f"\ndynamic / static: {d[2] / s[2]:.2f}x the bytes, {d[1] / s[1]:.2f}x the make-shards time, "
        f"loader {d[4] / s[4]:.2f}x the rate"
    )


if __name__ == "__main__":
    main()
