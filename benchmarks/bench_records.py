"""What the typed records that cross Beam stages cost: ``TokenizedDocument`` as a ``NamedTuple`` against the
plain tuple it replaced.

Beam's default coder (``FastPrimitivesCoder``) has its own compact encoding for an exact ``tuple`` only; a
tuple subclass takes its fallback, pickle (``apache_beam/coders/coder_impl.py``,
``FastPrimitivesCoderImpl.encode_to_stream``; a ``NamedTuple`` type hint maps to ``Any``, so no ``RowCoder``
either). Two measurements, both sides in turn in the same run:

1. the coder alone: encode and decode of one ``(bucket, document)`` element as the documents' GroupByKey
   carries it, a document of ``--pieces`` word pieces in sentences of 25, plain tuple vs ``NamedTuple``
   (median of 7 batches; bytes per element);
2. ``make-shards`` on the bundled demo books, with the code of revision ``--before`` (checked out with
   ``git archive`` into a temporary folder that goes first on ``PYTHONPATH``) and of this working tree, in
   turn for ``--repeats`` rounds: ``--input-format bert`` (2,250 short documents, about 50 word pieces each:
   the most documents per byte, so the most coder work per byte) and ``text`` (3 documents). Wall time and
   CPU time (user + system of the process tree) medians; the machine's load average is printed, and CPU time
   is the figure to trust on a loaded machine. The shards of both sides are compared byte for byte.

Reproduce::

    python benchmarks/bench_records.py --before <revision before the records> --repeats 3
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from apache_beam.coders import coders

from bertprep.pipeline.instances.bucket_files import ReadDocument, TokenizedDocument

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "pipeline" / "demo_corpus"


def data_dir() -> Path:
    return Path(os.environ.get("BERTPREP_DATA", REPO.parent / "shared" / "data")).resolve()


def coder_figures(pieces: int, n: int = 20000) -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, pieces, dtype=np.uint32).tobytes()
    lengths = np.full(pieces // 25, 25, dtype=np.int32).tobytes()
    named = TokenizedDocument(3, 123456, ids, lengths, 0)
    sentence = "Sentence {} of about a hundred characters, as a reader hands it on to the tokenizer, in a list."
    read = ReadDocument(3, 123456, [sentence.format(i) for i in range(20)])  # (distinct strings: pickle memoizes)
    coder = coders.FastPrimitivesCoder()
    print(f"coder: FastPrimitivesCoder, one (key, document) element, {n} per batch: a TokenizedDocument of {pieces}")
    print("word pieces (the documents' GroupByKey), a ReadDocument of 20 sentences (--dedup exact's GroupByKey)")
    cases = [(7, tuple(named)), (7, named), (b"key", tuple(read)), (b"key", read)]
    for element in cases:
        label = f"{type(element[1]).__name__}"
        encoded = coder.encode(element)
        assert coder.decode(encoded) == element and type(coder.decode(encoded)[1]) is type(element[1])
        enc, dec = [], []
        for _ in range(7):
            start = time.perf_counter()
            for _ in range(n):
                coder.encode(element)
            enc.append((time.perf_counter() - start) / n * 1e6)
            start = time.perf_counter()
            for _ in range(n):
                coder.decode(encoded)
            dec.append((time.perf_counter() - start) / n * 1e6)
        print(
            f"  {label:17s} {len(encoded):6d} bytes  encode {statistics.median(enc):6.2f} us  "
            f"decode {statistics.median(dec):6.2f} us"
        )


def checkout(revision: str, into: Path) -> Path:
    """The package folders of ``revision`` as an importable ``bertprep`` under ``into``."""
    package = into / "bertprep"
    package.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "core", "pipeline", "bert_model", "cli"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(package)], input=archive, check=True)
    return into


def run_once(pythonpath: str | None, input_format: str, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the finished process tree) of one make-shards run."""
    vocab = data_dir() / "vocab" / "bert-base-uncased-vocab.txt"
    cmd = [sys.executable, "-m", "bertprep.cli.main", "make-shards", "-i", str(DEMO), "--vocab", str(vocab)]
    cmd += ["-o", str(out), "--input-format", input_format, "-q"]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def same_shards(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.glob("*.arrow"))
    return names == sorted(p.name for p in b.glob("*.arrow")) and all(filecmp.cmp(a / n, b / n, False) for n in names)


def make_shards_figures(before: str, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"before": str(checkout(before, Path(tmp) / "before")), "after": None}
        for input_format in ("bert", "text"):
            times: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
            for r in range(repeats):
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                for side in order:
                    out = Path(tmp) / f"{input_format}-{side}-{r}"
                    times[side].append(run_once(sides[side], input_format, out))
                assert same_shards(Path(tmp) / f"{input_format}-before-{r}", Path(tmp) / f"{input_format}-after-{r}")
            print(f"make-shards --input-format {input_format} (demo books), {repeats} rounds, shards identical:")
            medians = {
                side: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
                for side, t in times.items()
            }
            for side, (wall, cpu) in medians.items():
                print(f"  {side:6s} wall {wall:6.2f} s  cpu {cpu:6.2f} s")
            (wb, cb), (wa, ca) = medians["before"], medians["after"]
            print(f"  after/before: wall {wa / wb - 1:+.1%}  cpu {ca / cb - 1:+.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision of the code to compare with (plain tuples)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pieces", type=int, default=500, help="word pieces of the coder's document")
    args = parser.parse_args()
    print(f"$ python benchmarks/bench_records.py --before {args.before} --repeats {args.repeats}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    coder_figures(args.pieces)
    make_shards_figures(args.before, args.repeats)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
