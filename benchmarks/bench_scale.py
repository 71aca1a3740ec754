"""How make-shards scales on Dask: 1 vs 2 workers, the adapter's cost against the local runner, memory.

Builds a corpus of about ``--mb`` MB (the shared WikiExtractor files repeated, as 16 files of near-equal
size), then runs ``bertprep make-shards`` with its defaults, each run a fresh process, in turn:

- ``local``: the default local runner (one worker process per core);
- ``dask-1`` / ``dask-2``: ``--runner=DaskRunner`` against a Dask cluster that this script starts with 1 or
  2 worker processes of 1 thread each (``distributed.LocalCluster(processes=True)``, the same processes a
  ``dask scheduler`` + ``dask worker`` deployment runs), the scheduler's address passed with
  ``--dask_client_address``.

It prints the median wall time of each, the speed-up of 2 workers over 1 and the adapter's overhead over the
local runner, the peak resident memory of each Dask worker process (sampled every 0.2 s with psutil), and an
extrapolation of the measured per-worker throughput to the BERT corpus (~20 GB of text) on N workers and its
Dataflow bill at list prices. Every run's shards
are compared: Dask's must equal the local runner's byte for byte.

    python benchmarks/bench_scale.py                       # 16 MB, 3 runs each
    python benchmarks/bench_scale.py --mb 64 --runs 1
    python benchmarks/bench_scale.py --memory 16,32,64 --runs 1   # peak memory per worker by corpus size

``--local SIZES`` measures the local runner alone at each corpus size (MB, comma-separated), for the
defaults and ``--pairing-scope file``, one run each in turn: wall time, the peak resident memory of the
whole process tree (the sum over make-shards and its worker processes, sampled every 0.2 s) and of its
largest process, and the shards' digest (the same at every setting of ``--memory-budget``)::

    python benchmarks/bench_scale.py --local 64,256,1024
    python benchmarks/bench_scale.py --local 1024 --scopes global --memory-budget 0
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

DATA = Path(os.environ.get("BERTPREP_DATA", Path(__file__).resolve().parent.parent.parent / "shared" / "data"))
VOCAB = DATA / "vocab" / "bert-base-uncased-vocab.txt"
BERTPREP = str(Path(sys.executable).parent / "bertprep")
BERT_CORPUS_GB = 20.0  # the BERT paper's pre-training text (BooksCorpus + English Wikipedia), about 3.3B words
# Dataflow batch list prices (USD; us-central1, check the current ones): per vCPU-hour, per GB-hour of memory, and
# per GB through Dataflow Shuffle; its default batch worker n1-standard-1 has 1 vCPU and 3.75 GB.
DATAFLOW_VCPU_HOUR, DATAFLOW_GB_HOUR, DATAFLOW_SHUFFLE_GB, DATAFLOW_GB_PER_VCPU = 0.056, 0.003557, 0.011, 3.75


def build_corpus(folder: Path, mb: int, parts: int = 16) -> Path:
    """About ``mb`` MB of the shared WikiExtractor articles (the files repeated), cut into ``parts`` files of
    near-equal size at article ends (``</doc>``), so no worker's share is an accident of the file sizes."""
    sources = sorted((DATA / "wikipedia" / "wikiextractor-featured" / "AA").glob("wiki_0*"))
    chunks, total = [], 0
    while total < mb * 1_000_000:
        for source in sources:
            data = source.read_bytes()
            chunks.append(data if data.endswith(b"\n") else data + b"\n")
            total += len(chunks[-1])
    text = b"".join(chunks)
    folder.mkdir(parents=True)
    start = 0
    for i in range(parts):
        end = len(text) if i == parts - 1 else text.find(b"</doc>\n", (i + 1) * len(text) // parts)
        end = len(text) if end < 0 else end + len(b"</doc>\n")
        (folder / f"wiki_{i:02d}").write_bytes(text[start:end])
        start = end
    return folder


def digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.glob("*.arrow")):
        h.update(p.read_bytes())
    return h.hexdigest()


class PeakRss:
    """Peak resident memory (MB) of each of ``pids``, sampled every 0.2 s while the ``with`` block runs."""

    def __init__(self, pids):
        self.procs = {pid: psutil.Process(pid) for pid in pids}
        self.peak = dict.fromkeys(pids, 0.0)
        self._stop = threading.Event()

    def _sample(self):
        while not self._stop.wait(0.2):
            for pid, proc in self.procs.items():
                with contextlib.suppress(psutil.Error):
                    self.peak[pid] = max(self.peak[pid], proc.memory_info().rss / 1e6)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class TreePeak:
    """Peak resident memory (MB) of a process and its descendants, summed (``tree``), and of the largest one
    (``largest``), sampled every 0.2 s until :meth:`stop`."""

    def __init__(self, pid: int):
        self.root = psutil.Process(pid)
        self.tree = self.largest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._stop.wait(0.2):
            with contextlib.suppress(psutil.Error):
                rss = []
                for proc in [self.root, *self.root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        rss.append(proc.memory_info().rss / 1e6)
                self.tree = max(self.tree, sum(rss))
                self.largest = max(self.largest, max(rss, default=0.0))

    def stop(self):
        self._stop.set()
        self._thread.join()


def local_scale(tmp: Path, sizes: list[int], scopes: list[str], extra: list[str]) -> None:
    """The local runner at each size of ``sizes`` (MB), with each pairing scope of ``scopes``: a table."""
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    print("| corpus | pairing scope | wall | MB/s | process tree peak | largest process | shards sha256 |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for mb in sizes:
        corpus = build_corpus(tmp / f"corpus-{mb}", mb)
        size_mb = sum(p.stat().st_size for p in corpus.iterdir()) / 1e6
        for scope in scopes:
            out = tmp / f"out-{mb}-{scope}"
            cmd = [BERTPREP, "make-shards", "-q", "-i", str(corpus), "--vocab", str(VOCAB), "-o", str(out)]
            cmd += [*extra, "--pairing-scope", scope]
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
            peak = TreePeak(proc.pid)
            if proc.wait():
                raise SystemExit(f"make-shards failed ({proc.returncode}): {shlex.join(cmd)}")
            wall = time.perf_counter() - start
            peak.stop()
            print(
                f"| {size_mb:.0f} MB | {scope} | {wall:.1f} s | {size_mb / wall:.2f} | {peak.tree:.0f} MB "
                f"| {peak.largest:.0f} MB | {digest(out)[:12]} |",
                flush=True,
            )
            subprocess.run(["rm", "-rf", str(out)], check=True)
        subprocess.run(["rm", "-rf", str(corpus)], check=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


def make_shards(corpus: Path, out: Path, extra: list[str]) -> float:
    cmd = [BERTPREP, "make-shards", "-q", "-i", str(corpus), "--vocab", str(VOCAB), "-o", str(out), *extra]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def dask_runs(corpus: Path, tmp: Path, workers: int, runs: int, extra: list[str]) -> tuple[list[float], dict, str]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
        ) as cluster,
        Client(cluster) as client,
    ):
        pids = list(client.run(os.getpid).values())
        times, peaks = [], {}
        for i in range(runs):
            out = tmp / f"dask{workers}-{i}"
            with PeakRss(pids) as rss:
                times.append(
                    make_shards(
                        corpus,
                        out,
                        [*extra, "--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"],
                    )
                )
            peaks = {pid: max(peaks.get(pid, 0.0), mb) for pid, mb in rss.peak.items()}
            shards = digest(out)
        return times, peaks, shards


def extrapolate(per_worker: float, efficiency: float) -> None:
    """Print, on paper, the BERT corpus (``BERT_CORPUS_GB``) on N one-thread workers: minutes, core-hours and
    the Dataflow bill, from the measured ``per_worker`` MB/s of one Dask worker and the ``efficiency`` of the
    second worker (speed-up from 1 to 2 workers / 2), assumed to hold for every added worker. The global
    scope's shuffle carries about the tokenized text once (int32 ids, about the size of the text)."""
    print(
        f"\nextrapolation (on paper) from {per_worker:.2f} MB/s per worker, each added worker at "
        f"{efficiency:.0%} efficiency as measured from 1 to 2:"
    )
    print("| worker cores | minutes | core-hours | Dataflow (n1-standard-1 workers + shuffle) |")
    print("|---:|---:|---:|---:|")
    for n in (16, 64, 256, 1024):
        minutes = BERT_CORPUS_GB * 1000 / (per_worker * n * efficiency) / 60
        core_hours = n * minutes / 60
        cost = core_hours * (DATAFLOW_VCPU_HOUR + DATAFLOW_GB_PER_VCPU * DATAFLOW_GB_HOUR)
        cost += BERT_CORPUS_GB * DATAFLOW_SHUFFLE_GB
        print(f"| {n} | {minutes:.0f} | {core_hours:.0f} | ${cost:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=16, help="corpus size in MB (16 files)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each configuration (median)")
    parser.add_argument("--memory", default="", help="comma-separated corpus sizes (MB) for the memory table")
    parser.add_argument("--pairing-scope", default="global", choices=("global", "file"))
    parser.add_argument("--local", default="", help="comma-separated corpus sizes (MB): the local runner alone")
    parser.add_argument("--scopes", default="global,file", help="--local: the pairing scopes to run")
    args, more = parser.parse_known_args()  # more: make-shards options (e.g. --memory-budget) for --local
    extra = ["--pairing-scope", args.pairing_scope]
    print(f"command: python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if args.local:
            local_scale(tmp, [int(x) for x in args.local.split(",")], args.scopes.split(","), more)
            return
        corpus = build_corpus(tmp / "corpus", args.mb)
        size_mb = sum(p.stat().st_size for p in corpus.iterdir()) / 1e6
        local = [make_shards(corpus, tmp / f"local-{i}", extra) for i in range(args.runs)]
        local_shards = digest(tmp / "local-0")
        one, peaks1, shards1 = dask_runs(corpus, tmp, 1, args.runs, extra)
        two, peaks2, shards2 = dask_runs(corpus, tmp, 2, args.runs, extra)
        med = {name: statistics.median(t) for name, t in (("local", local), ("dask-1", one), ("dask-2", two))}
        print(f"\ncorpus: {size_mb:.1f} MB in 16 files, make-shards defaults, --pairing-scope {args.pairing_scope}")
        print("| runner | median wall | MB/s | runs |")
        print("|---|---|---|---|")
        for name, t in (("local", local), ("dask-1", one), ("dask-2", two)):
            runs = ", ".join(f"{x:.1f}" for x in t)
            print(f"| {name} | {med[name]:.1f} s | {size_mb / med[name]:.2f} | {runs} |")
        print(f"\nspeed-up, 2 Dask workers over 1: {med['dask-1'] / med['dask-2']:.2f}x")
        print(
            "adapter overhead, Dask with 2 workers over the local runner (2 workers): "
            f"{med['dask-2'] / med['local']:.2f}x"
        )
        print(
            f"peak RSS per Dask worker: 1 worker {max(peaks1.values()):.0f} MB; 2 workers "
            f"{', '.join(f'{v:.0f}' for v in peaks2.values())} MB"
        )
        same = f"dask-1 {shards1 == local_shards}, dask-2 {shards2 == local_shards}"
        print(f"shards equal to the local runner's: {same}")
        extrapolate(size_mb / med["dask-1"], med["dask-1"] / med["dask-2"] / 2)
        for mb in [int(x) for x in args.memory.split(",") if x]:
            sized = build_corpus(tmp / f"corpus-{mb}", mb)
            _, peaks, _ = dask_runs(sized, tmp / f"mem-{mb}", 2, 1, extra)
            per = ", ".join(f"{v:.0f}" for v in peaks.values())
            print(f"memory: {mb} MB corpus, 2 workers: peak RSS per worker {per} MB")


if __name__ == "__main__":
    main()
