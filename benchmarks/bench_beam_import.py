"""What Beam's Google Cloud imports cost each make-shards process when the ``gcp`` extra is installed.

``import apache_beam`` imports ``apache_beam.io``, whose ``__init__`` tries ``apache_beam.io.gcp.bigquery``,
``pubsub`` and ``gcsio`` (and ``apache_beam.io.filesystems`` tries ``gcsfilesystem``), each inside
``try/except ImportError``: with the Google Cloud client libraries installed they load, in the client and in
every Beam worker process, whether or not a path is remote. Nothing bertprep imports can avoid that short of
patching Beam or installing without the extra (``pip install bertprep`` has no Google Cloud libraries).

This script times ``import apache_beam`` in fresh processes, in turn: as installed, and with those modules
made to fail to import (a finder that raises ImportError for ``apache_beam.io.gcp`` and ``google.cloud``, as if
the extra were absent; used here only, to measure)::

    python benchmarks/bench_beam_import.py --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

WITHOUT_GCP = r"""
import importlib.abc, sys
class _NoGcp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("apache_beam.io.gcp", "google.cloud", "apache_beam.transforms.xlang.io")):
            raise ImportError(name)
sys.meta_path.insert(0, _NoGcp())
"""
TIMED = "import time; t = time.perf_counter(); import apache_beam; print(time.perf_counter() - t)"


def once(without_gcp: bool) -> float:
    code = (WITHOUT_GCP if without_gcp else "") + TIMED
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"command: python {' '.join(sys.argv)}")
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.runs):
        for without in (False, True):
            times[without].append(once(without))
    for without, label in ((False, "as installed"), (True, "Google Cloud imports failing (no gcp extra)")):
        runs = ", ".join(f"{t:.2f}" for t in times[without])
        print(f"import apache_beam, {label}: median {statistics.median(times[without]):.2f} s ({runs})")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
