"""What each ``make-shards --output-format`` costs against the Arrow shards, on the same corpus: wall time of the
whole command (``bertprep make-shards`` in a fresh process: the library's import included) and bytes on disk of
the published output (every file but the manifest). The formats run in turn, round after round, so that each
sees the same machine load; the figures are medians.

    python benchmarks/bench_formats.py -i ../shared/data/gutenberg \
        --vocab ../shared/data/vocab/bert-base-uncased-vocab.txt

``--extra`` is passed to every run (e.g. ``--extra="--masking dynamic --objective none"``). A format whose library
is not installed (``bertprep[mds]``, ``bertprep[megatron]``) is reported as such and skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

#: format -> the module it needs (None: none beyond bertprep's own).
FORMATS = {"arrow": None, "mds": "streaming", "megatron": "megatron"}


def _bytes_on_disk(folder: str) -> int:
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
        if name != "manifest.json"
    )


def _run(fmt: str, args: argparse.Namespace, out: str) -> float:
    command = [
        sys.executable, "-m", "bertprep.cli.main", "make-shards", "-i", args.inputs, "--vocab", args.vocab,
        "-o", out, "--output-format", fmt, "-q", *shlex.split(args.extra),
    ]  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-i", "--inputs", required=True, help="make-shards -i")
    parser.add_argument("--vocab", required=True, help="make-shards --vocab")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated, in turn each round")
    parser.add_argument("--repeats", type=int, default=3, help="rounds")
    parser.add_argument("--extra", default="", help="more make-shards options, for every run")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv))
    wanted = [f for f in args.formats.split(",") if f]
    missing = [f for f in wanted if FORMATS[f] and importlib.util.find_spec(FORMATS[f]) is None]
    for fmt in missing:
        print(f"{fmt}: skipped (pip install 'bertprep[{fmt}]')")
    formats = [f for f in wanted if f not in missing]
    walls: dict[str, list[float]] = {f: [] for f in formats}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-formats-") as root:
        for _ in range(args.repeats):
            for fmt in formats:
                out = os.path.join(root, fmt)
                walls[fmt].append(_run(fmt, args, out))
                sizes[fmt] = _bytes_on_disk(out)
    base_wall = statistics.median(walls["arrow"]) if "arrow" in walls else None
    base_size = sizes.get("arrow")
    for fmt in formats:
        wall = statistics.median(walls[fmt])
        versus = ""
        if base_wall and fmt != "arrow":
            versus = f" ({wall / base_wall:.2f}x the wall, {sizes[fmt] / base_size:.2f}x the bytes of arrow)"
        print(
            f"{fmt:9s} wall {wall:6.1f} s (median of {args.repeats}: {', '.join(f'{w:.1f}' for w in walls[fmt])}), "
            f"{sizes[fmt] / 1e6:7.2f} MB on disk{versus}"
        )


if __name__ == "__main__":
    main()
