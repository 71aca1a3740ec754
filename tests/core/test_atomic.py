"""core/atomic.py: the one module of durable writes (both halls): files and directories never left half
written, staging folders named by command, host and process, and only dead runs' folders removed."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertprep.core import atomic


def test_atomic_file_replaces_only_on_success(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic.atomic_file(str(path)) as tmp:
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]  # the temporary file is gone
    atomic.write_atomic(str(path), lambda p: Path(p).write_text("new"))
    assert path.read_text() == "new"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_replace_directory_swaps_whole_directories(tmp_path):
    final, tmp = tmp_path / "model", tmp_path / ".tmp-model"
    atomic.replace_directory(_make_dir(tmp, "a"), str(final))  # no old directory
    assert sorted(os.listdir(final)) == ["a"]
    atomic.replace_directory(_make_dir(tmp, "b"), str(final))  # replaces the old one as a whole
    assert sorted(os.listdir(final)) == ["b"]
    assert sorted(os.listdir(tmp_path)) == ["model"]  # neither the temporary nor the old directory is left


def test_replace_directory_keeps_the_entries_asked_for_and_can_be_finished(tmp_path, monkeypatch):
    final, tmp, aside = tmp_path / "out", tmp_path / ".tmp-out", tmp_path / ".out.old"
    _make_dir(final, "vocab.txt")
    (final / "notes.md").write_text("mine")
    atomic.replace_directory(_make_dir(tmp, "vocab.txt"), str(final), aside=str(aside), keep=lambda n: n == "notes.md")
    assert sorted(os.listdir(final)) == ["notes.md", "vocab.txt"] and (final / "notes.md").read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["out"]
    real_replace = os.replace

    def killed_after_the_swap(src, dst):  # the third rename (the kept entry) never happens
        if str(dst).endswith("notes.md"):
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", killed_after_the_swap)
    with pytest.raises(KeyboardInterrupt):
        atomic.replace_directory(
            _make_dir(tmp, "vocab.txt"), str(final), aside=str(aside), keep=lambda n: n == "notes.md"
        )
    monkeypatch.setattr(atomic.os, "replace", real_replace)
    assert sorted(os.listdir(final)) == ["vocab.txt"] and aside.is_dir()  # the new directory is in place
    atomic.finish_replace(str(aside), str(final), keep=lambda n: n == "notes.md")
    assert sorted(os.listdir(final)) == ["notes.md", "vocab.txt"] and sorted(os.listdir(tmp_path)) == ["out"]


def test_atomic_files_commit_in_order_and_leave_no_temporary_file(tmp_path, monkeypatch):
    paths = [str(tmp_path / name) for name in ("a.txt", "b.txt", "marker.txt")]
    with atomic.atomic_files(paths) as temps:
        assert all(os.path.basename(t).startswith(".") and t.endswith(".tmp") for t in temps)  # hidden
        for tmp, path in zip(temps, paths, strict=True):
            with open(tmp, "w") as f:
                f.write(os.path.basename(path))
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt", "marker.txt"]
    real_replace, moved = os.replace, []

    def failing_replace(src, dst):
        if dst.endswith("b.txt"):
            raise OSError("disk full")
        moved.append(os.path.basename(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    (tmp_path / "marker.txt").unlink()
    with pytest.raises(OSError, match="disk full"), atomic.atomic_files(paths) as temps:
        for tmp in temps:
            open(tmp, "w").close()
    assert moved == ["a.txt"]  # the marker, last, never moved in
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.txt"]  # no temporary file left


def test_replace_entries_swaps_the_named_entries_and_moves_the_marker_last(tmp_path, monkeypatch):
    directory, staging = tmp_path / "run", tmp_path / "run" / ".staging"
    directory.mkdir()
    for name in ("best", "results.json", "keep.txt"):
        (directory / name).write_text("old")
    staging.mkdir()
    for name in ("results.json", "best", "metrics.jsonl"):
        (staging / name).write_text("new")
    real_replace, order = os.replace, []
    monkeypatch.setattr(os, "replace", lambda src, dst: (order.append(os.path.basename(dst)), real_replace(src, dst)))
    atomic.replace_entries(str(staging), str(directory), ["best", "results.json"], aside=str(directory / ".old"))
    assert sorted(os.listdir(directory)) == ["best", "keep.txt", "metrics.jsonl", "results.json"]
    assert (directory / "best").read_text() == "new" and (directory / "keep.txt").read_text() == "old"
    order.clear()
    (staging).mkdir()
    for name in ("results.json", "best"):
        (staging / name).write_text("newer")
    atomic.replace_entries(
        str(staging), str(directory), ["best", "results.json"], aside=str(directory / ".old"), last="results.json"
    )
    assert order[-1] == "results.json" and (directory / "results.json").read_text() == "newer"


def _make_dir(path, name) -> str:
    path.mkdir()
    (path / name).write_text(name)
    return str(path)


def test_staging_names_say_whose_they_are_and_only_dead_runs_are_stale(tmp_path):
    name = atomic.staging_name("run")
    prefix = f"{atomic.STAGING_PREFIX}run-{atomic.host_name()}-{os.getpid()}-"
    assert name.startswith(prefix) and len(name) == len(prefix) + 8  # hidden, host, pid, 8 hex
    assert atomic.staging_name("run") != name  # a second one of the same process is another folder
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"{atomic.STAGING_PREFIX}run-{atomic.host_name()}-{dead.pid}-0123abcd"
    other_host = f"{atomic.STAGING_PREFIX}run-elsewhere_{atomic.host_name()}-{dead.pid}-0123abcd"
    assert atomic.is_stale_staging(stale, "run") and not atomic.is_stale_staging(name, "run")
    assert not atomic.is_stale_staging(other_host, "run")  # another host's process cannot be checked from here
    assert not atomic.is_stale_staging(stale, "vocab")  # another command's folder is never this one's to remove
    assert atomic.is_stale_staging(f"{atomic.STAGING_PREFIX}tmp-0123abcd", "tmp")  # make-shards before pids
    for folder in (stale, name, other_host, f"{atomic.STAGING_PREFIX}vocab-{atomic.host_name()}-{dead.pid}-0a"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "best").write_text("x")
    assert atomic.remove_stale_staging(str(tmp_path), "run") == [str(tmp_path / stale)]
    assert sorted(os.listdir(tmp_path)) == sorted(
        {name, other_host} | {f for f in os.listdir(tmp_path) if "vocab" in f}
    )
    with pytest.raises(ValueError, match="lower-case letters"):
        atomic.staging_name("run-1")


def test_write_bytes_replaces_in_one_step_through_any_file_operations(tmp_path, monkeypatch):
    path = tmp_path / "manifest.json"
    path.write_bytes(b"old")
    atomic.write_bytes(str(path), b"new")
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["manifest.json"]
    calls = []

    class Recording(atomic.LocalFiles):  # what the shard store does over Beam's FileSystems
        @staticmethod
        def rename(src, dst):
            calls.append((os.path.basename(src), os.path.basename(dst)))
            raise OSError("no space left on device")

    with pytest.raises(OSError, match="no space"):
        atomic.write_bytes(str(path), b"newer", Recording)
    ((tmp, final),) = calls
    assert tmp.startswith(".manifest.json.") and tmp.endswith(".tmp") and final == "manifest.json"
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["manifest.json"]  # the temporary file is gone


def test_write_text_synced_and_fsync_file_leave_the_text_on_disk(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    atomic.write_text_synced(str(tmp_path / "config.json"), "{}\n")
    atomic.fsync_file(str(tmp_path / "config.json"))
    assert (tmp_path / "config.json").read_text(encoding="utf-8") == "{}\n" and len(synced) == 2


def test_pid_alive():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert atomic.pid_alive(os.getpid()) and not atomic.pid_alive(dead.pid)


def test_write_directory_swaps_in_the_files_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
    final = tmp_path / "vocab"
    atomic.write_directory({"vocab.txt": "a\nb\n", "x.json": "{}"}, str(final), "test")
    assert _read(final) == {"vocab.txt": "a\nb\n", "x.json": "{}"} and sorted(os.listdir(tmp_path)) == ["vocab"]
    (final / "notes.md").write_text("mine")
    atomic.write_directory({"vocab.txt": "c\n"}, str(final), "test", keep=lambda n: n == "notes.md")
    assert _read(final) == {"notes.md": "mine", "vocab.txt": "c\n"} and sorted(os.listdir(tmp_path)) == ["vocab"]
    monkeypatch.setattr(atomic, "replace_directory", _raise_interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_directory({"vocab.txt": "d\n"}, str(final), "test")
    assert _read(final) == {"notes.md": "mine", "vocab.txt": "c\n"} and sorted(os.listdir(tmp_path)) == ["vocab"]


def test_repair_replace_restores_the_old_directory_or_finishes_the_new_one(tmp_path):
    final, aside = tmp_path / "out", tmp_path / ".out.old"
    assert atomic.repair_replace(str(aside), str(final)) is None
    _make_dir(aside, "vocab.txt")  # killed between the two renames: no final
    assert atomic.repair_replace(str(aside), str(final)) == "restored" and sorted(os.listdir(final)) == ["vocab.txt"]
    (final / "notes.md").write_text("mine")
    os.replace(final, aside)  # killed after the swap: the new directory is in place, the old one aside
    _make_dir(final, "vocab.txt")
    assert atomic.repair_replace(str(aside), str(final), keep=lambda n: n == "notes.md") == "finished"
    assert sorted(os.listdir(final)) == ["notes.md", "vocab.txt"] and sorted(os.listdir(tmp_path)) == ["out"]


def test_only_atomic_renames_or_syncs_files():
    """Durable writes live in core/atomic.py alone (docs/architecture.md): no other module of the package
    calls os.replace, os.rename or os.fsync itself."""
    repo = Path(__file__).resolve().parents[2]
    callers = []
    for package in ("core", "pipeline", "bert_model", "cli"):
        for path in sorted((repo / package).rglob("*.py")):
            if path == repo / "core" / "atomic.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr in ("replace", "rename", "fsync")
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "os"
                ):
                    callers.append(f"{path.relative_to(repo)}:{node.lineno}")
    assert not callers


def _read(directory) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(directory.iterdir())}


def _raise_interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_a_worker_writing_after_its_run_removed_the_staging_folder_makes_nothing_again(tmp_path):
    """A Dask worker whose scheduler died goes on with its task after make-shards has removed the staging
    folder; before, its writes made the folders again and the output directory was left holding only a dead
    run's ``.bertprep-tmp-*``. Now each worker-side writer refuses, naming the folder."""
    import pyarrow as pa

    from bertprep.core import schema
    from bertprep.pipeline import errors
    from bertprep.pipeline.beam import spill
    from bertprep.pipeline.instances.bucket_files import TokenizedDocument
    from bertprep.pipeline.shards import store

    out = tmp_path / "out"
    staging = out / store.staging_dir_name()
    staging.mkdir(parents=True)
    rows = pa.Table.from_pylist([], schema=schema.shard_schema(64, "nsp", False))
    assert store.write_bucket_file(str(staging / "buckets" / "bucket-0.arrows"), rows, 64) == 0  # alive: writes
    spiller = spill.Spiller(spill.spill_folder(str(staging)), budget_bytes=0)
    spiller.close()
    assert os.listdir(staging) == ["buckets"]
    shutil.rmtree(staging)  # the run failed and removed its staging folder
    with pytest.raises(atomic.StagingGone, match=f"{staging.name}: this run's staging folder does not exist"):
        store.write_bucket_file(str(staging / "buckets" / "bucket-1.arrows"), rows, 64)
    with pytest.raises(atomic.StagingGone):
        store.copy_vocab(str(staging), ["[PAD]", "[UNK]"])
    with pytest.raises(atomic.StagingGone):
        spill.Spiller(spill.spill_folder(str(staging)), budget_bytes=0).keep(
            TokenizedDocument(0, 1, b"\x01\x00\x00\x00", b"", 0)
        )
    errors.record_error(str(staging), ValueError("late"))  # best effort: records nothing, raises nothing
    assert os.listdir(out) == []  # nothing made again
    atomic.check_staging_alive("gs://bucket/out/.bertprep-tmp-x/buckets/b.arrows")  # object stores: no folders
