"""What ``--dedup exact`` and ``--eval-fraction`` cost in ``make-shards`` (pipeline/beam/heldout.py).

Two measurements, in CPU seconds (``time.process_time``; the pipeline runs in-process with
``--direct_num_workers=1 --direct_running_mode=in_memory``, so the figures do not depend on how busy the
other cores are):

1. The work per pass over the input: reading alone; reading + normalising and hashing each document
   (``heldout.normalized_text`` + ``text_digest``: the ``file`` scope's extra dedup pass); reading +
   WordPiece tokenization (the first step of the main pass).
2. Whole ``make-shards`` runs on the same input, each in a fresh process (CPU and peak RSS of that process):
   default, ``--dedup exact``, ``--eval-fraction``, both; for ``--pairing-scope global`` and ``file``.

    python benchmarks/bench_heldout_dedup.py                      # the Wikipedia sample of ../shared/data
    python benchmarks/bench_heldout_dedup.py -i 'corpus/*.txt' --input-format bert --dupe-factor 10
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bertprep.core.normalization import bert_normalizer
from bertprep.pipeline import readers
from bertprep.pipeline.beam import heldout
from bertprep.pipeline.beam.run import run_make_shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.text.tokenization import SentenceEncoder, load_vocab

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def _cpu(fn) -> tuple[float, object]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-i",
        "--input",
        default=str(DATA / "wikipedia" / "wikiextractor-featured" / "AA" / "*"),
        help="input glob(s), comma-separated (default: the 241 Wikipedia featured articles)",
    )
    parser.add_argument("--input-format", default="wikiextractor")
    parser.add_argument("--vocab", default=str(DATA / "vocab" / "bert-base-uncased-vocab.txt"))
    parser.add_argument(
        "--dupe-factor",
        type=int,
        default=1,
        help="1 (default) shows the largest relative overhead; the original's default is 10",
    )
    parser.add_argument("--eval-fraction", type=float, default=0.01)
    parser.add_argument("--one-run", default=None, help=argparse.SUPPRESS)  # internal: one run, JSON result
    args = parser.parse_args(argv)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    files = readers.expand_inputs([p for p in args.input.split(",") if p])
    if args.one_run:
        _one_run(args, files, json.loads(args.one_run))
        return
    print("command:", shlex.join([sys.executable, *sys.argv]) if argv is None else shlex.join(argv))
    size = sum(os.path.getsize(f) for f in files if os.path.exists(f))
    read = lambda: [d for f in files for d in readers.read_documents(f, args.input_format)]  # noqa: E731
    t_read, docs = _cpu(read)
    normalize = bert_normalizer(True).normalize_str
    t_hash, _ = _cpu(lambda: [heldout.text_digest(heldout.normalized_text(d.sentences, normalize)) for d in read()])
    encoder = SentenceEncoder(load_vocab(args.vocab), True)
    t_tok, _ = _cpu(lambda: [encoder.encode_flat(d.sentences) for d in read()])
    print(f"input: {len(files)} files, {size / 1e6:.1f} MB, {len(docs):,} documents")
    print(f"  read only                      {t_read:6.2f} s CPU")
    print(f"  read + normalise + hash (dedup) {t_hash:6.2f} s CPU  (+{t_hash - t_read:.2f} s over reading)")
    print(f"  read + tokenize (main pass)    {t_tok:6.2f} s CPU  (+{t_tok - t_read:.2f} s over reading)")

    runs = {
        "default": {},
        "--dedup exact": {"dedup": "exact"},
        f"--eval-fraction {args.eval_fraction}": {"eval_fraction": args.eval_fraction},
        "both": {"dedup": "exact", "eval_fraction": args.eval_fraction},
    }
    print(f"make-shards, --dupe-factor {args.dupe_factor}, one in-process worker, each run in its own process:")
    own = list(sys.argv[1:] if argv is None else argv)
    for scope in ("global", "file"):
        base = None
        for name, extra in runs.items():
            run = subprocess.run(
                [sys.executable, __file__, *own, "--one-run", json.dumps(dict(extra, pairing_scope=scope))],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(run.stdout.strip().splitlines()[-1])
            base = base or r["cpu_s"]
            extra_text = ""
            if r["eval_documents"] is not None:
                extra_text += f", {r['eval_documents']} eval documents"
            if r["dropped"] is not None:
                extra_text += f", {r['dropped']} duplicates dropped"
            print(
                f"  {scope:6s} {name:22s} {r['cpu_s']:6.2f} s CPU ({r['cpu_s'] / base:.2f}x), peak RSS "
                f"{r['peak_rss_mb']:5.0f} MB, {r['instances']:,} training instances{extra_text}"
            )


def _one_run(args, files, extra: dict) -> None:
    with tempfile.TemporaryDirectory() as out:
        config = ShardsConfig(
            inputs=tuple(files),
            vocab=args.vocab,
            output_dir=out,
            input_format=args.input_format,
            instance=InstanceConfig(dupe_factor=args.dupe_factor),
            **extra,
        )
        seconds, manifest = _cpu(lambda: run_make_shards(config, IN_PROCESS))
    print(
        json.dumps(
            {
                "cpu_s": seconds,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "instances": manifest["statistics"]["instances"],
                "eval_documents": manifest["split"]["eval_documents"] if "split" in manifest else None,
                "dropped": manifest["dedup"]["documents_dropped"] if "dedup" in manifest else None,
            }
        )
    )


if __name__ == "__main__":
    main()
