"""Weighted source mixing (``make-shards --source``, ``--mixture-alpha``): the realised mixture against the asked
one on the shared data.

Three sources: the 241 Wikipedia featured articles (WikiExtractor, ``wiki``), the 424 WikiExtractor JSON
articles (``wikijson``) and the 12 Gutenberg books (``books``). For each mixture the script runs the real CLI
(``bertprep make-shards --dupe-factor 1``, defaults otherwise) and prints, per source, the asked share of word
pieces beside the realised shares of the sampled documents' word pieces, of the instances and of the
instances' word pieces (the manifest's ``"mixture"`` entry), and the largest gap in percentage points.

    python benchmarks/bench_mixture.py                     # weights 0.5 / 1.5 / 2 and --mixture-alpha 0.3
    python benchmarks/bench_mixture.py --seeds 12345,1,2   # the same for other --random-seed values
    python benchmarks/bench_mixture.py --objective none    # no segment drawn from another document
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
SOURCES = {
    "wiki": "wikipedia/wikiextractor-featured/AA/wiki_*",
    "wikijson": "wikipedia/wikiextractor-json/wiki_00",
    "books": "gutenberg/*.txt",
}
MIXTURES = {
    "weights 0.5 / 1.5 / 2": {"weights": [0.5, 1.5, 2.0]},
    "--mixture-alpha 0.3": {"alpha": 0.3},
}


def run(data: Path, mixture: dict, seed: int, out: Path, objective: str = "nsp") -> dict:
    cmd = [sys.executable, "-m", "bertprep.cli.main", "make-shards", "-q", "--overwrite", "--dupe-factor", "1"]
    cmd += ["--objective", objective]
    cmd += ["--vocab", str(data / "vocab" / "bert-base-uncased-vocab.txt"), "-o", str(out)]
    cmd += ["--random-seed", str(seed)]
    for k, (name, glob) in enumerate(SOURCES.items()):
        weight = f":{mixture['weights'][k]}" if "weights" in mixture else ""
        cmd += ["--source", f"{name}={data / glob}{weight}"]
    if "alpha" in mixture:
        cmd += ["--mixture-alpha", str(mixture["alpha"])]
    subprocess.run(cmd, check=True)
    return json.loads((out / "manifest.json").read_text())["mixture"]


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder ($DATA)")
    parser.add_argument("--seeds", default="12345", help="--random-seed values, comma-separated")
    parser.add_argument("--objective", default="nsp", choices=("nsp", "sop", "none"), help="make-shards --objective")
    args = parser.parse_args()
    print("# reproduce:", shlex.join([sys.executable, *sys.argv]))
    work = Path(tempfile.mkdtemp(prefix="bench_mixture_"))
    print(
        "\n| mixture | seed | source | rate | asked tokens | documents' tokens | instances | instances' tokens |"
        "\n|---|---:|---|---:|---:|---:|---:|---:|"
    )
    worst = {"token_share": 0.0, "instance_share": 0.0, "instance_token_share": 0.0}
    for label, mixture in MIXTURES.items():
        for seed in (int(s) for s in args.seeds.split(",")):
            section = run(args.data, mixture, seed, work / "out", args.objective)
            for src in section["sources"]:
                asked = src["asked_token_share"]
                print(
                    f"| {label} | {seed} | {src['name']} | {src['rate']:.3f} | {pct(asked)} | "
                    f"{pct(src['token_share'])} | {pct(src.get('instance_share'))} | "
                    f"{pct(src.get('instance_token_share'))} |"
                )
                for key in worst:
                    if src.get(key) is not None:
                        worst[key] = max(worst[key], abs(src[key] - asked))
    print("\nlargest gap to the asked share of word pieces, percentage points:")
    for key, gap in worst.items():
        print(f"  {key}: {100 * gap:.2f}")


if __name__ == "__main__":
    main()
