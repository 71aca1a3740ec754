"""Fault tests for make-shards and build-vocab (issue 12, "Nothing lost, nothing hangs"): each bad input or
environment fault gives a one-line error naming the file or option, exits non-zero, and loses no user data
(the input's bytes and an earlier run's output stay as they were)."""

from __future__ import annotations

import bz2
import errno
import gzip
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.pipeline.shards import publish
from bertprep.pipeline.shards import store as shards
from cli_factory import bertprep, invoke
from conftest import FIXTURES

FIXTURES = FIXTURES / "pipeline"
VOCAB = str(FIXTURES / "vocab.txt")
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
TWO_PROCESSES = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
SHARD_OPTIONS = ["--max-seq-length", "64", "--max-predictions-per-seq", "10", "--dupe-factor", "2", "-q"]


def _run(args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _make(inputs, out, *extra, beam=IN_PROCESS):
    return _run(
        [
            "make-shards",
            "-i",
            ",".join(str(i) for i in inputs),
            "--vocab",
            VOCAB,
            "-o",
            out,
            *SHARD_OPTIONS,
            *extra,
            *beam,
        ]
    )


def _vocab(inputs, out, *extra):
    return _run(["build-vocab", *inputs, "-o", out, "--vocab-size", "300", "-q", *extra])


def _snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (hidden ones included), by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _one_line_error(output: str) -> str:
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output
    assert "Traceback" not in output, output
    return errors[0]


@pytest.fixture(scope="module")
def _finished_run(tmp_path_factory) -> Path:
    """One finished make-shards output directory, read only (:func:`previous_output` copies it)."""
    out = tmp_path_factory.mktemp("finished") / "shards"
    result = _make([FIXTURES / "a.txt"], out)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def previous_output(tmp_path, _finished_run):
    """A finished make-shards output directory of this test's own (a copy of the module's run) and the sha256 of
    each of its files."""
    out = tmp_path / "shards"
    shutil.copytree(_finished_run, out)
    return out, _snapshot(out)


# ------------------------------------------------------------------------- 1. truncated compressed input


def _corpus_bytes(copies: int = 1) -> bytes:
    return ((FIXTURES / "a.txt").read_bytes() + b"\n" + (FIXTURES / "b.txt").read_bytes()) * copies


def _truncated(tmp_path: Path, kind: str) -> Path:
    data = _corpus_bytes()
    if kind == "gz":
        blob, name = gzip.compress(data, mtime=0), "corpus.txt.gz"
    elif kind == "bz2-one-block":  # 69 KB in one 900 KB bzip2 block: nothing decompresses before the cut
        blob, name = bz2.compress(data, 9), "corpus.txt.bz2"
    else:  # 208 KB in 100 KB blocks (level 1): the first two blocks decompress, then the data stops
        blob, name = bz2.compress(_corpus_bytes(3), 1), "corpus.txt.bz2"
    path = tmp_path / "in" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(blob[: len(blob) * 3 // 4])
    return path


@pytest.mark.parametrize("kind", ["gz", "bz2-one-block", "bz2-multi-block"])
def test_truncated_compressed_input_fails_make_shards_and_build_vocab(tmp_path, kind):
    path = _truncated(tmp_path, kind)
    before = path.read_bytes()
    tool = "gzip" if kind == "gz" else "bzip2"

    result = _make([path], tmp_path / "shards")
    assert result.exit_code == 1, result.output
    line = _one_line_error(result.output)
    assert f"{path} is truncated or corrupt ({tool}: " in line and "re-download it" in line
    if kind == "bz2-multi-block":  # whole blocks were read before the end: they must not pass for the file
        assert "after 0 decompressed bytes" not in line
    assert not (tmp_path / "shards").exists()  # no output at all, let alone a manifest

    result = _vocab([path], tmp_path / "vocab")
    assert result.exit_code == 1, result.output
    assert f"{path} is truncated or corrupt ({tool}: " in _one_line_error(result.output)
    assert not (tmp_path / "vocab" / "vocab.txt").exists()
    assert path.read_bytes() == before


def test_complete_compressed_input_still_reads_whole(tmp_path):
    """The check does not refuse good files: a multi-block bzip2 and a concatenated gzip read in full."""
    from bertprep.pipeline.readers import ReaderStats, read_documents

    data = _corpus_bytes(3)
    (tmp_path / "c.txt.bz2").write_bytes(bz2.compress(data, 1))
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(data[:1000], mtime=0) + gzip.compress(data[1000:], mtime=0))
    for name in ("c.txt.bz2", "c.txt.gz"):
        stats = ReaderStats()
        list(read_documents(str(tmp_path / name), "bert", stats=stats))
        assert stats.bytes == len(data)


# ------------------------------------------------------------------------- 2. --overwrite never loses the old output


@pytest.mark.slow
def test_failed_overwrite_keeps_the_previous_output(tmp_path, previous_output):
    out, before = previous_output
    bad = _truncated(tmp_path, "gz")  # fails while reading
    result = _make([bad], out, "--overwrite")
    assert result.exit_code == 1 and str(bad) in _one_line_error(result.output)
    assert _snapshot(out) == before

    result = _make([FIXTURES / "a.txt"], out, "--overwrite", "--num-shards", "100000")  # fails after making instances
    assert result.exit_code == 1 and "--num-shards 100000 is more than" in _one_line_error(result.output)
    assert _snapshot(out) == before

    result = _make([FIXTURES / "a.txt", FIXTURES / "b.txt"], out, "--overwrite", "--num-shards", "2")  # succeeds
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [e["file"] for e in manifest["shards"]] + ["manifest.json", "vocab.txt", "README.md"]  # README: dataset card
    )
    assert manifest["statistics"]["files"] == 2


@pytest.mark.slow
def test_killed_overwrite_keeps_the_previous_output_and_the_next_run_removes_its_leftovers(tmp_path, previous_output):
    out, before = previous_output
    command = [
        sys.executable,
        "-m",
        "bertprep.cli.main",
        "make-shards",
        "-i",
        f"{FIXTURES}/a.txt,{FIXTURES}/b.txt",
        "--vocab",
        VOCAB,
        "-o",
        str(out),
        "--dupe-factor",
        "20",
        "--overwrite",
        "-q",
        *IN_PROCESS,
    ]
    logs_before = set(Path(tempfile.gettempdir()).glob("bertprep-workers-*"))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob(f"{shards.TMP_PREFIX}*")) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process.poll() is None, "the run ended before it could be killed"
        time.sleep(0.3)  # let it write into its staging folder
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert set(Path(tempfile.gettempdir()).glob("bertprep-workers-*")) <= logs_before  # -q's capture is unnamed
    leftovers = list(out.glob(f"{shards.TMP_PREFIX}*"))
    assert len(leftovers) == 1 and str(process.pid) in leftovers[0].name
    # the killed run's lock stays (nothing runs at a kill -9); it names the dead process, and the next run takes it over
    assert json.loads((out / publish.LOCK_NAME).read_text())["pid"] == process.pid
    kept = {k: v for k, v in _snapshot(out).items() if not k.startswith((shards.TMP_PREFIX, publish.LOCK_NAME))}
    assert kept == before

    live = out / shards.staging_dir_name()  # this process's own name: a live run, kept
    live.mkdir()
    result = _make([FIXTURES / "a.txt"], out, "--overwrite", "--random-seed", "7")
    assert result.exit_code == 0, result.output
    assert not leftovers[0].exists()
    assert [p.name for p in out.glob(f"{shards.TMP_PREFIX}*")] == [live.name]
    assert json.loads((out / "manifest.json").read_text())["config"]["random_seed"] == 7
    assert not (out / publish.LOCK_NAME).exists()


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_input_inside_the_output_is_refused_and_kept(tmp_path, previous_output):
    out, before = previous_output
    result = _make([out], out, "--overwrite")  # the folder holds the previous shards and vocab.txt
    assert result.exit_code == 1
    line = _one_line_error(result.output)
    assert "is inside --output-dir" in line and str(out) in line
    assert _snapshot(out) == before

    # a corpus kept in the output folder, and the vocab.txt make-shards copied there, are fine to use
    (out / "corpus.txt").write_bytes((FIXTURES / "b.txt").read_bytes())
    corpus = (out / "corpus.txt").read_bytes()
    result = _run(
        [
            "make-shards",
            "-i",
            out / "corpus.txt",
            "--vocab",
            out / "vocab.txt",
            "-o",
            out,
            "--overwrite",
            *SHARD_OPTIONS,
            *IN_PROCESS,
        ]
    )
    assert result.exit_code == 0, result.output
    assert (out / "corpus.txt").read_bytes() == corpus
    assert (out / "vocab.txt").read_bytes() == Path(VOCAB).read_bytes()


def test_build_vocab_refuses_an_input_it_would_replace(tmp_path):
    folder = tmp_path / "v"
    assert _vocab([FIXTURES / "a.txt"], folder).exit_code == 0
    (folder / "corpus.txt").write_bytes((FIXTURES / "b.txt").read_bytes())
    before = _snapshot(folder)
    result = _vocab([folder], folder, "--overwrite")
    assert result.exit_code == 1
    line = _one_line_error(result.output)
    # round two: one rule for every command (core.paths.check_writes_apart)
    written = folder / "vocab.txt"
    assert f"build-vocab would write {written}, which is INPUTS {written}" in line and "--output-dir" in line
    assert _snapshot(folder) == before


# ------------------------------------------------------------------------- 7. environment faults


def test_vocab_that_is_a_directory(tmp_path):
    # a directory is the tokenizer it holds (a model's or build-vocab's directory): here its vocab.txt
    made = _make([FIXTURES / "a.txt"], tmp_path / "shards", "--vocab", str(FIXTURES))
    assert made.exit_code == 0, made.output
    assert (tmp_path / "shards" / "vocab.txt").read_bytes() == (FIXTURES / "vocab.txt").read_bytes()
    empty = tmp_path / "no-vocab"
    empty.mkdir()
    result = _make([FIXTURES / "a.txt"], tmp_path / "shards2", "--vocab", str(empty))
    assert result.exit_code == 2
    assert f"{empty} is a directory without a vocab.txt or tokenizer.json" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "shards2").exists()


def test_output_that_is_a_file_is_refused_before_any_work(tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("my notes\n")
    result = _make([FIXTURES / "a.txt"], target)
    assert result.exit_code == 1
    assert f"--output-dir {target} is a file" in _one_line_error(result.output)

    started = time.monotonic()
    result = _vocab([FIXTURES / "a.txt", FIXTURES / "b.txt"], target)
    assert result.exit_code == 1
    assert f"--output-dir {target} is a file" in _one_line_error(result.output)
    assert "vocab size" not in result.output and time.monotonic() - started < 5  # refused before training
    assert target.read_text() == "my notes\n"


@pytest.fixture
def unwritable_dir(tmp_path):
    """A directory this process cannot create files in: a 0555 folder, or (as root, who may write there)
    /sys where it is mounted read-only."""
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        yield locked
        locked.chmod(0o755)
        return
    try:
        os.mkdir("/sys/bertprep-write-test")
    except OSError:
        yield Path("/sys")
    else:
        os.rmdir("/sys/bertprep-write-test")
        pytest.skip("no read-only directory for root here")


def test_output_that_is_not_writable_is_refused_before_any_work(unwritable_dir):
    result = _make([FIXTURES / "a.txt"], unwritable_dir / "shards")
    assert result.exit_code == 1
    line = _one_line_error(result.output)
    assert f"--output-dir {unwritable_dir / 'shards'}" in line and "choose a writable --output-dir" in line

    started = time.monotonic()
    result = _vocab([FIXTURES / "a.txt", FIXTURES / "b.txt"], unwritable_dir / "vocab")
    assert result.exit_code == 1
    line = _one_line_error(result.output)
    assert f"--output-dir {unwritable_dir / 'vocab'} is not writable" in line
    assert "vocab size" not in result.output and time.monotonic() - started < 5  # refused before training


class _FullDevice(io.RawIOBase):
    """A file on a full disk: every write fails with ENOSPC, as the kernel's would (and as /dev/full does)."""

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.slow  # ~3 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_disk_full_while_writing_shards(tmp_path, previous_output, monkeypatch):
    """ENOSPC while a shard is written: one line naming the shard, the old output untouched."""
    from apache_beam.io.filesystems import FileSystems

    class FullDisk(FileSystems):
        @staticmethod
        def create(path, *args, **kwargs):
            if os.path.basename(path).startswith("shard-"):
                return io.BufferedWriter(_FullDevice())
            return FileSystems.create(path, *args, **kwargs)

    monkeypatch.setattr(shards, "FileSystems", FullDisk)
    out, before = previous_output
    result = _make([FIXTURES / "b.txt"], out, "--overwrite")
    assert result.exit_code == 1
    line = _one_line_error(result.output)
    assert "no space left on device while writing shard shard-00000-of-00001.arrow" in line
    assert "free some space" in line
    assert _snapshot(out) == before  # no half-written shard, no staging folder, the old manifest in place


def test_disk_full_message_names_what_was_written():
    err = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert shards.os_error_message(err, "writing shard X").startswith("no space left on device while writing shard X;")


# ------------------------------------------------------------------------- 8. the message, not the source line


@pytest.fixture(scope="module")
def worker_process_error(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``make-shards -q`` on two worker processes that fails in a worker (``--num-shards`` above the instances
    made), run as a user's shell runs it (a worker's output reaches the terminal's stderr, which only a process of
    its own shows): the finished process and the output folder it was given. Read by the tests of its message
    and of -q."""
    out = tmp_path_factory.mktemp("worker-error") / "shards"
    done = bertprep(
        "make-shards", "-i", FIXTURES / "a.txt", "--vocab", VOCAB, "-o", out, "--num-shards", 100000, "-q",
        *TWO_PROCESSES, timeout=120,
    )  # fmt: skip
    return done, out


@pytest.mark.slow
def test_error_from_a_worker_process_keeps_its_message(worker_process_error):
    result, out = worker_process_error
    assert result.returncode == 1
    line = _one_line_error(result.stderr)
    assert "{n}" not in line and "{total}" not in line
    assert "--num-shards 100000 is more than the " in line and "instances made; use fewer shards" in line
    assert not out.exists()


# ------------------------------------------------------------------------- 9. unknown options


def test_mistyped_option_is_refused_before_anything_runs(tmp_path):
    result = _make([FIXTURES / "a.txt"], tmp_path / "shards", "--dupe-factr", "3")
    assert result.exit_code == 2
    assert "no such option: --dupe-factr" in result.output and "did you mean --dupe-factor?" in result.output
    assert not (tmp_path / "shards").exists()

    result = _make([FIXTURES / "a.txt"], tmp_path / "shards", "--direct_num_worker=1")
    assert result.exit_code == 2 and "did you mean --direct_num_workers?" in result.output


def test_beam_options_still_pass_through(tmp_path):
    # (which arguments Beam parses: tests/cli/test_shards_options.py)
    result = _make([FIXTURES / "a.txt"], tmp_path / "shards", "--project=my-project", "--job_name=x")
    assert result.exit_code == 0, result.output


# ------------------------------------------------------------------------- 10. binary input, duplicate tokens, -q


def test_random_bytes_without_nul_are_refused(tmp_path):
    rng = random.Random(0)
    noise = tmp_path / "noise.txt"
    noise.write_bytes(bytes(rng.randrange(1, 256) for _ in range(200_000)))
    result = _make([noise], tmp_path / "shards")
    assert result.exit_code == 1
    line = _one_line_error(result.output)
    assert f"{noise}: looks like a binary file" in line and "control bytes" in line
    assert not (tmp_path / "shards").exists()


def test_binary_after_the_first_megabyte_is_refused(tmp_path):
    from bertprep.pipeline.readers import InputError, read_documents

    text = (FIXTURES / "a.txt").read_bytes()
    path = tmp_path / "mixed.txt"
    path.write_bytes(text * (1_100_000 // len(text) + 1) + os.urandom(100_000).replace(b"\x00", b"\x01"))
    with pytest.raises(InputError, match=r"mixed\.txt: looks like a binary file .* of bytes 1,048,576-"):
        list(read_documents(str(path), "bert"))


@pytest.mark.slow
def test_real_text_in_other_scripts_and_encodings_is_not_binary(shared_data):
    from bertprep.pipeline.readers import read_documents

    for name in (
        "gutenberg/shakespeare-caesar.txt",
        "cjk/ko/constitution-of-korea.txt",
        "cjk/zh/luxun-kongyiji.txt",
        "gutenberg/melville-moby_dick.txt",
    ):
        assert len(list(read_documents(str(shared_data / name)))) > 0, name


def test_duplicate_token_in_the_vocab_is_refused(tmp_path):
    lines = Path(VOCAB).read_text(encoding="utf-8").splitlines()
    lines.insert(200, "[MASK]")  # the original would silently move [MASK] to id 200
    first, second = [i for i, token in enumerate(lines) if token == "[MASK]"]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = _make([FIXTURES / "a.txt"], tmp_path / "shards", "--vocab", str(vocab))
    assert result.exit_code == 2
    expected = f"{vocab}:{second + 1}: the token '[MASK]' is already on line {first + 1}"
    assert expected in " ".join(result.output.split()), result.output
    assert not (tmp_path / "shards").exists()


@pytest.mark.slow
def test_quiet_silences_the_worker_logs(worker_process_error):
    """With -q a failing multi-process run prints the one-line error and nothing else (it printed ~75 lines
    of worker traceback before)."""
    done, out = worker_process_error
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        line for line in done.stderr.strip().splitlines() if line.startswith("Error: --num-shards 100000 is more")
    ]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


@pytest.mark.slow
def test_progress_lines_stay_and_a_user_error_has_no_traceback_without_quiet(tmp_path):
    """Without -q the progress lines are logged, and a user error is still one line (no worker traceback)."""
    out = tmp_path / "shards"
    done = invoke(  # (in this process: the pipeline runs in it, its log records go to the run's stderr)
        "make-shards", "-i", FIXTURES / "a.txt", "--vocab", VOCAB, "-o", out, "--num-shards", 100000, *IN_PROCESS,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"INFO make-shards: 1 input files -> {out}" in done.stderr
    assert "Traceback" not in done.stderr and "{n}" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("Error: --num-shards 100000 is more than the ")
