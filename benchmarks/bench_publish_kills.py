#!/usr/bin/env python
"""kill -9 during make-shards' publish on a bucket, at random moments: never a folder a reader accepts with mixed
shards.

Google Cloud Storage has no rename: Beam copies each object, then deletes the old one, so a publish there is
many calls, and a run killed between two of them leaves whatever those calls had done. This script runs a real
``bertprep make-shards`` process against a local GCS emulator (``gcp-storage-emulator``, in memory, on a free
port; the real ``google-cloud-storage`` client through ``STORAGE_EMULATOR_HOST``), into an output folder that
holds an older complete set, and sends it SIGKILL (its whole process group: the runner's workers too) at a
random moment of its publish: once the publish journal (``.bertprep-publish.json``) has appeared in the folder,
after a delay drawn uniformly from the length of an uninterrupted run's publish (x1.2). Every fourth kill is
drawn from the whole run instead (most of those land before the publish, where the old set must stay). After
each kill it reads the folder as a reader would (downloaded; the manifest, then ``inspect --verify``'s checks
of every shard against it) and classifies it:

- ``old``: a reader accepts it and it is the older set, byte for byte;
- ``new``: a reader accepts it and it is the new set, byte for byte;
- ``refused``: no manifest, or one whose shards are absent or not those it lists (sizes, sha256): ``inspect``
  and ``train`` refuse the folder in one line;
- ``MIXED``: a reader accepts it but it is neither set (the failure this script exists to catch).

Then the next run (the same command) must finish or undo the cut-short publish: the folder must hold a whole
set afterwards (``after next run``). Prints one line per kill and a table; exits 1 on any ``MIXED`` or any
folder not whole after the next run.

    python benchmarks/bench_publish_kills.py --kills 20

Needs the ``cloud`` extra (``pip install -e '.[cloud]'``, which brings ``gcp-storage-emulator``) and nothing
outside localhost. The corpus is ``--input`` (default: the shared WikiExtractor articles ``wiki_0*``, cut into
8 files) with the vocab ``--vocab`` (default: Google's uncased BERT vocab in the shared data).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import hashlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(os.environ.get("BERTPREP_SHARED_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
DEFAULT_INPUT = str(SHARED / "wikipedia/wikiextractor-featured/AA/wiki_0*")
DEFAULT_VOCAB = str(SHARED / "vocab/bert-base-uncased-vocab.txt")
BUCKET = "bertprep-kills"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def gcs_emulator(log: Path):
    """``gcp-storage-emulator`` on a free port for the block (in memory), its process group stopped at the end."""
    port = free_port()
    exe = Path(sys.executable).with_name("gcp-storage-emulator")
    argv = [str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--quiet"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the GCS emulator did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def split_corpus(pattern: str, folder: Path, parts: int) -> None:
    """The articles of ``pattern``'s files cut at document ends into ``parts`` files of near-equal size."""
    text = "".join(Path(p).read_text(encoding="utf-8") for p in sorted(glob.glob(pattern)))
    docs = [d + "</doc>\n" for d in text.split("</doc>\n") if d.strip()]
    folder.mkdir(parents=True)
    per = -(-len(docs) // parts)
    for i in range(parts):
        (folder / f"part-{i:02d}.txt").write_text("".join(docs[i * per : (i + 1) * per]), encoding="utf-8")


def digests(root: str) -> dict[str, str]:
    """Object name (relative to ``root``) -> sha256, for the objects a reader sees (not the hidden ones)."""
    from apache_beam.io.filesystems import FileSystems

    out = {}
    for meta in FileSystems.match([root + "/**"])[0].metadata_list:
        name = meta.path[len(root) :].lstrip("/")
        if name.startswith(".") or "/." in name:
            continue
        with FileSystems.open(meta.path) as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def restore(source: str, target: str) -> None:
    """Make the objects under ``target`` exactly those under ``source``."""
    from apache_beam.io.filesystems import FileSystems

    old = [m.path for m in FileSystems.match([target + "/**"])[0].metadata_list]
    if old:
        FileSystems.delete(old)
    paths = [m.path for m in FileSystems.match([source + "/**"])[0].metadata_list]
    FileSystems.copy(paths, [target + p[len(source) :] for p in paths])


def verdict(root: str, local: Path, old: dict[str, str], new: dict[str, str]) -> str:
    """``old``, ``new``, ``refused`` or ``MIXED`` (see the module docstring), or the reader's errors."""
    from apache_beam.io.filesystems import FileSystems

    from bertprep.core import storage
    from bertprep.pipeline.shards.inspection import verify_shards

    shutil.rmtree(local, ignore_errors=True)
    for meta in FileSystems.match([root + "/**"])[0].metadata_list:
        path = local / meta.path[len(root) :].lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileSystems.open(meta.path) as f:
            path.write_bytes(f.read())
    try:
        storage.read_manifest(str(local))
    except (FileNotFoundError, ValueError):
        return "refused"  # no manifest, or one naming an absent shard
    if verify_shards(str(local))["errors"]:
        return "refused"  # a shard that is not the one its manifest lists (size, sha256, rows)
    seen = digests(root)
    without_manifest = {k: v for k, v in seen.items() if not k.endswith("manifest.json")}
    if without_manifest == {k: v for k, v in old.items() if not k.endswith("manifest.json")}:
        return "old"
    if without_manifest == {k: v for k, v in new.items() if not k.endswith("manifest.json")}:
        return "new"
    return "MIXED"


def journal_exists(root: str) -> bool:
    from apache_beam.io.filesystems import FileSystems

    from bertprep.pipeline.shards.publish import JOURNAL_NAME

    return FileSystems.exists(f"{root}/{JOURNAL_NAME}")


def run_until_journal(cmd: list[str], root: str, timeout: float) -> tuple[subprocess.Popen, float | None]:
    """Start ``cmd`` in its own process group; return it once the publish journal exists under ``root`` (and
    the seconds since the start), or once it has exited (None)."""
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    while proc.poll() is None and time.monotonic() - started < timeout:
        if journal_exists(root):
            return proc, time.monotonic() - started
        time.sleep(0.05)
    return proc, None


def make_shards(args, corpus: Path, output: str, dupe_factor: int, overwrite: bool) -> list[str]:
    cmd = [sys.executable, "-m", "bertprep.cli.main", "make-shards", "-q", "-i", str(corpus), "--vocab", args.vocab]
    cmd += ["-o", output, "--dupe-factor", str(dupe_factor), "--num-shards", str(args.num_shards)]
    # one in-process worker: a shorter run, the same publish (the publish runs in the launching process whatever
    # the runner's mode)
    cmd += ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
    return cmd + (["--overwrite"] if overwrite else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="Runs killed (each at a random moment).")
    parser.add_argument("--input", default=DEFAULT_INPUT, help="Text files (a glob) cut into the corpus.")
    parser.add_argument("--vocab", default=DEFAULT_VOCAB, help="WordPiece vocab.txt.")
    parser.add_argument("--num-shards", type=int, default=16, help="Output shards (more: a longer publish).")
    parser.add_argument("--seed", type=int, default=0, help="Seeds the kill moments.")
    args = parser.parse_args()
    # (this script's own Beam calls, without Google credentials, retry the credentials search with a traceback
    # per try before they go anonymous, which the emulator accepts)
    logging.getLogger("apache_beam.utils.retry").setLevel(logging.ERROR)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="bertprep-kills-"))
    try:
        corpus = tmp / "corpus"
        split_corpus(args.input, corpus, 8)
        with gcs_emulator(tmp / "emulator.log") as url:
            os.environ.update({"STORAGE_EMULATOR_HOST": url, "NO_GCE_CHECK": "true"})
            from google.cloud import storage

            storage.Client.create_anonymous_client().create_bucket(BUCKET)
            root = f"gs://{BUCKET}"
            out, saved, reference = f"{root}/out", f"{root}/saved", f"{root}/reference"
            subprocess.run(make_shards(args, corpus, out, 1, False), check=True, capture_output=True)
            restore(out, saved)
            old = digests(out)
            subprocess.run(make_shards(args, corpus, reference, 2, False), check=True, capture_output=True)
            new = digests(reference)
            # the publish's length: from the journal's appearance to the end of an uninterrupted run into `out`
            restore(saved, out)
            started = time.monotonic()
            proc, journal_at = run_until_journal(make_shards(args, corpus, out, 2, True), out, 3600)
            proc.wait()
            full = time.monotonic() - started
            publish_s = full - (journal_at if journal_at is not None else full)
            print(
                f"an uninterrupted run: {full:.1f} s, its publish {publish_s:.2f} s; old set {len(old)} objects, "
                f"new set {len(new)}",
                flush=True,
            )
            outcomes, after = collections.Counter(), collections.Counter()
            failed = False
            for kill in range(args.kills):
                restore(saved, out)
                anywhere = kill % 4 == 3
                if anywhere:
                    moment = rng.uniform(0.0, full * 1.1)
                    proc = subprocess.Popen(
                        make_shards(args, corpus, out, 2, True),
                        start_new_session=True,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    where = f"at {moment:5.1f} s of the run"
                else:
                    proc, journal_at = run_until_journal(make_shards(args, corpus, out, 2, True), out, full * 3)
                    moment = rng.uniform(0.0, publish_s * 1.2)
                    where = f"{moment:5.2f} s into the publish"
                try:
                    proc.wait(moment)
                    finished = True
                except subprocess.TimeoutExpired:
                    finished = False
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                seen = verdict(out, tmp / "download", old, new)
                outcomes[seen] += 1
                # the next run: finishes the cut-short publish (or undoes it), then refuses to overwrite without
                # --overwrite; the folder must then hold a whole set
                subprocess.run(make_shards(args, corpus, out, 2, False), capture_output=True)
                then = verdict(out, tmp / "download", old, new)
                after[then] += 1
                bad = seen not in ("old", "new", "refused") or then not in ("old", "new")
                failed |= bad
                print(
                    f"kill {kill + 1:2d} {where}{' (the run had finished)' if finished else ''}: "
                    f"{seen}; after the next run: {then}{'  <-- FAILURE' if bad else ''}",
                    flush=True,
                )
            print()
            print("| after the kill | runs | after the next run | runs |")
            print("|---|---:|---|---:|")
            rows = max(len(outcomes), len(after))
            left, right = sorted(outcomes.items()), sorted(after.items())
            for i in range(rows):
                a = left[i] if i < len(left) else ("", "")
                b = right[i] if i < len(right) else ("", "")
                print(f"| {a[0]} | {a[1]} | {b[0]} | {b[1]} |")
            print(f"\ncommand: python benchmarks/bench_publish_kills.py --kills {args.kills} --seed {args.seed}")
            return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
