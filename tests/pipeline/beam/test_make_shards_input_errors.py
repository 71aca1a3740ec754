"""make-shards and build-vocab refuse a bad input or option in one line, with and without ``-q``, and write
nothing: a user error in a worker, a missing segmenter package, a split below the floor, a wiki index that is
not the dump's, a decontamination file that is no text, mixture and option mistakes, a dataset's metadata
files. The commands run in this process (``cli_factory.invoke``, or click's runner): with no Beam arguments a
small input runs its pipeline in the command's own process (``run.in_process_args``), so a process of its own
would show nothing more.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from cli_factory import invoke, one_line
from conftest import FIXTURES

PIPELINE = FIXTURES / "pipeline"
VOCAB = PIPELINE / "vocab.txt"
IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def make_shards(*args, quiet: bool = True):
    """make-shards in this process (one in-memory worker)."""
    extra = ["-q"] if quiet else []
    return CliRunner().invoke(
        cli, ["make-shards", "--vocab", str(VOCAB), "--dupe-factor", "1", *extra, *map(str, args), *IN_PROCESS]
    )


def _arrow_dataset(path: Path) -> Path:
    """A Hugging Face ``save_to_disk``-style file (Arrow IPC stream) with an int column and no ``text``."""
    import pyarrow as pa

    table = pa.table({"id": [1, 2], "content": ["The river rose.", "The bridge closed."]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return path


@pytest.mark.parametrize("case", ["nul-byte", "hf-no-text-column"])
@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_user_error_in_a_worker_is_one_line_without_quiet(tmp_path, case):
    """Before: without -q, the local runner's workers printed Beam's traceback of the failed bundle (83-97
    lines, 2-3 tracebacks) above the one-line error."""
    if case == "nul-byte":
        data = tmp_path / "nul.txt"
        data.write_bytes(b"hello world\x00 this is text\n\nmore text here.\n")
        extra, named = [], f"{data}: looks like a binary file (NUL byte at offset 11)"
    else:
        data = _arrow_dataset(tmp_path / "data-00000-of-00001.arrow")
        extra, named = ["--input-format", "hf"], "the dataset has no column 'text' (its columns: id, content)"
    done = invoke("make-shards", "-i", data, *extra, "--vocab", VOCAB, "-o", tmp_path / "out", "--dupe-factor", 1)
    assert done.returncode == 1
    assert named in one_line(done.stderr)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["make-shards", "make-shards -q", "build-vocab"])
@pytest.mark.slow  # ~5 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_segmenter_whose_package_is_missing_is_one_line(tmp_path, monkeypatch, command):
    """Before: `--segmenter blingfire` without blingfire failed in every worker (373 lines, 12 tracebacks; 169
    with -q; build-vocab 54); the docs promised one line naming the extra."""
    from bertprep.pipeline.readers import segmentation

    monkeypatch.setitem(sys.modules, "blingfire", None)  # `import blingfire` fails, as where it is not installed
    segmentation.get_segmenter.cache_clear()  # (a segmenter made before, with the package, is cached)
    name, *flags = command.split()
    out = tmp_path / "out"
    if name == "make-shards":
        args = [name, *flags, "-i", PIPELINE / "a.txt", "--vocab", VOCAB, "-o", out, "--dupe-factor", 1]
    else:
        args = [name, PIPELINE / "a.txt", "-o", out]
    done = invoke(*args, "--input-format", "text", "--segmenter", "blingfire")
    segmentation.get_segmenter.cache_clear()
    assert done.returncode == 1
    line = one_line(done.stdout + done.stderr)
    assert "segmenter 'blingfire' (--segmenter) needs the package 'blingfire'" in line
    assert "pip install 'bertprep[fast]'" in line and "leave --segmenter out" in line
    assert not out.exists()


def test_split_bytes_below_the_floor_is_refused(tmp_path):
    """Before: `--split-bytes 1` on a 400 KB file planned 400,000 ranges and ran on."""
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--split-bytes", "1")
    assert result.exit_code == 2
    line = one_line(result.output)
    assert "Invalid value for '--split-bytes': 1 bytes per range is below the floor of 1,048,576 (1 MiB)" in line
    assert "or 0 to read every file whole" in line
    assert not (tmp_path / "out").exists()
    assert make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "ok", "--split-bytes", "0").exit_code == 0


@pytest.fixture
def dump(shared_data, tmp_path) -> tuple[Path, Path]:
    """A multistream dump of a few streams and its index (tests/pipeline/readers/test_ranges.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "readers"))
    from test_ranges import multistream_dump

    return multistream_dump(shared_data / "wikipedia" / "enwiki-table-markup.xml.bz2", tmp_path, copies=3)


def test_an_index_holding_garbage_is_named(dump):
    """Before: a ValueError traceback (`invalid literal for int() with base 10: b'this is not an index'`)."""
    import bz2

    from bertprep.pipeline.readers import InputError
    from bertprep.pipeline.readers.ranges import file_ranges

    path, index = dump
    index.write_bytes(bz2.compress(b"this is not an index\n"))
    with pytest.raises(InputError) as err:
        file_ranges(str(path), path.stat().st_size, 4096)
    assert f"{index}:1: 'this is not an index' is not a multistream index line (offset:page_id:title)" in str(err.value)
    assert "move it away to read the dump whole" in str(err.value)


def test_an_index_of_another_dump_is_named_not_the_dump(dump):
    """Before: offsets shifted by 7 bytes (the dump intact) failed in a worker as "truncated or corrupt ...
    re-download it", blaming the dump."""
    import bz2

    from bertprep.pipeline.readers import InputError
    from bertprep.pipeline.readers.ranges import file_ranges

    path, index = dump
    lines = bz2.decompress(index.read_bytes()).decode().splitlines()
    shifted = [f"{int(o) + 7}:{rest}" for o, rest in (line.split(":", 1) for line in lines)]
    index.write_bytes(bz2.compress(("\n".join(shifted) + "\n").encode()))
    with pytest.raises(InputError) as err:
        file_ranges(str(path), path.stat().st_size, 4096)
    message = str(err.value)
    assert f"{index}: offset " in message and f"is not the start of a bz2 stream of {path}" in message
    assert "this index does not belong to that dump" in message and "re-download" not in message


@pytest.mark.parametrize("case", ["missing", "folder", "binary"])
def test_a_decontaminate_file_that_is_no_text_file_is_refused(tmp_path, case):
    """Before: a missing file or a folder failed in a worker (87 lines, 3 tracebacks without -q); a binary file
    was read as "120 texts" of replacement characters."""
    target = {"missing": tmp_path / "dev.tsv", "folder": tmp_path, "binary": tmp_path / "eval.bin"}[case]
    if case == "binary":
        target.write_bytes(bytes(range(256)) * 12)
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--decontaminate", target, quiet=False)
    assert result.exit_code == 1, result.output
    line = one_line(result.output)
    expected = {
        "missing": f"--decontaminate {target}: no such file; check the path",
        "folder": f"--decontaminate {target} is a directory; give the evaluation files themselves",
        "binary": f"--decontaminate {target}: looks like a binary file (NUL byte at offset 0), not evaluation texts",
    }[case]
    assert expected in line
    assert not (tmp_path / "out").exists()


def test_a_headerless_cola_tsv_counts_its_sentences_only(tmp_path):
    """Before: without a header every column was a text column: CoLA's source, label and mark columns counted
    as 1,743 "texts" for 527 rows (here 7 for 2)."""
    cola = tmp_path / "in_domain_dev.tsv"
    cola.write_text("gj04\t1\t\tOur friends will not buy this analysis, let alone the next one we propose.\n"
                    "gj04\t0\t*\tThey drank the pub dry and then they drank the next one too.\n")  # fmt: skip
    from bertprep.pipeline.beam.decontamination import evaluation_texts

    fmt, texts = evaluation_texts(str(cola))
    assert fmt == "glue-tsv" and texts == [
        "Our friends will not buy this analysis, let alone the next one we propose.",
        "They drank the pub dry and then they drank the next one too.",
    ]


def test_the_decontaminate_ngram_help_says_short_texts_match_whole():
    """Before: the help said texts shorter than n words "are not matched"; they are matched whole from 8 words
    (decontamination.MIN_WORDS, as docs/make-shards.md says)."""
    from bertprep.pipeline.beam.decontamination import MIN_WORDS

    result = CliRunner().invoke(cli, ["make-shards", "--help"])
    text = " ".join(result.output.split())
    assert "are not matched" not in text
    assert f"An evaluation text shorter than this is matched whole when it has at least {MIN_WORDS} words" in text


@pytest.mark.slow  # ~8 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_every_document_held_out_names_the_eval_fraction(tmp_path):
    """Before: "no instances were made: every document was empty or skipped" (and a traceback without -q)."""
    done = invoke("make-shards", "-i", PIPELINE / "a.txt", "--vocab", VOCAB, "-o", tmp_path / "out",
                  "--dupe-factor", 1, "--eval-fraction", 0.99)  # fmt: skip
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "no training instances were made: --eval-fraction 0.99 held out every document that makes one" in line
    assert "empty or skipped" not in line and "lower --eval-fraction" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "spec,expected",
    [
        ({"sources": [{"name": "a", "inputs": "A"}], "weights": {"a": 3}}, "unknown key 'weights' at the top level"),
        ({"sources": [{"name": "a", "inputs": "A", "wieght": 2}]},
         "unknown key 'wieght' in source 1 ('a'); did you mean 'weight'?"),
        ({"sources": []}, '"sources" is empty; list at least one source'),
    ],
)  # fmt: skip
def test_a_mixture_file_with_unknown_keys_or_no_source_is_refused(tmp_path, spec, expected):
    """Before: unknown keys were ignored (a typo's weight silently 1), and no source made shards of the bundled
    demo corpus."""
    spec = json.loads(json.dumps(spec).replace('"A"', json.dumps(str(PIPELINE / "a.txt"))))
    mixture = tmp_path / "mixture.json"
    mixture.write_text(json.dumps(spec))
    result = make_shards("--mixture", mixture, "-o", tmp_path / "out")
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert f"Invalid value for --mixture: {mixture}: {expected}" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "options,expected",
    [
        (["--dedup", "exact", "--dedup-threshold", "0.5"],
         "Warning: --dedup-threshold is used by --dedup minhash only; with --dedup exact it has no effect"),
        (["--masked-lm-prob", "0.3"],
         "Warning: --max-predictions-per-seq 20 caps the masked word pieces of a full instance at 16.0%, below "
         "--masked-lm-prob 0.3; raise it to about 38"),
    ],
)  # fmt: skip
def test_an_option_that_does_nothing_or_is_capped_is_warned_about(tmp_path, options, expected):
    """Before: both ran without a word (0.3 at 128 tokens under the default cap of 20 masked 15.8%)."""
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", *options, quiet=False)
    assert result.exit_code == 0, result.output
    assert expected in result.output
    assert (tmp_path / "out" / "manifest.json").exists()


def test_the_default_options_warn_about_nothing(tmp_path):
    """The same checks stay silent at the defaults (128 tokens, 0.15, a cap of 20: 19 masked)."""
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", quiet=False)
    assert result.exit_code == 0 and "Warning" not in result.output, result.output


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_cased_vocab_txt_alone_is_refused_under_the_default_lower_casing(tmp_path):
    """Before: a cased vocab.txt without its tokenizer.json (nothing records how it was built) got a warning and
    lower-cased text anyway. Now the run needs the casing given; either flag is taken."""
    cased = tmp_path / "vocab.txt"
    tokens = VOCAB.read_text(encoding="utf-8").splitlines()
    cased.write_text("\n".join(tokens + [t.capitalize() for t in tokens if t.isalpha() and t.islower()][:40]) + "\n")
    result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / "out", "--vocab", cased)
    assert result.exit_code == 2, result.output
    line = one_line(result.output)
    assert "Invalid value for --vocab" in line and "a cased vocab" in line and "pass --no-do-lower-case" in line
    assert f"{cased} alone does not record how it was built" in line
    assert not (tmp_path / "out").exists()
    for flag in ("--no-do-lower-case", "--do-lower-case"):
        result = make_shards("-i", PIPELINE / "a.txt", "-o", tmp_path / flag, "--vocab", cased, flag)
        assert result.exit_code == 0, result.output


def test_reader_counters_are_written_sorted_whatever_the_merge_order():
    """Before: statistics.formats (and the skip counters) kept the order in which the workers' counts were
    merged, so identical runs on inputs of mixed formats wrote different manifest bytes."""
    from bertprep.pipeline.shards.store import merge_counts, summarize_statistics

    kinds = (("text", "empty"), ("bert", "too_long"))
    parts = [{"reader": {"formats": {f: 1}, "skipped_documents": {w: 1}, "skipped_lines": {w: 2}}} for f, w in kinds]
    one = summarize_statistics(merge_counts(parts[0], parts[1]))
    other = summarize_statistics(merge_counts(parts[1], parts[0]))
    assert json.dumps(one) == json.dumps(other)
    assert list(one["formats"]) == ["bert", "text"] and list(one["documents"]["skipped"]) == ["empty", "too_long"]


def test_a_datasets_metadata_files_are_not_input_files(tmp_path):
    """Before: `--input-format hf` on a save_to_disk folder counted dataset_info.json and state.json as input
    files (3 files for 1 data file)."""
    ds = tmp_path / "ds"
    ds.mkdir()
    import pyarrow as pa

    table = pa.table({"text": ["The river rose after the rain. The bridge was closed.", "One more sentence here."]})
    with pa.OSFile(str(ds / "data-00000-of-00001.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (ds / "dataset_info.json").write_text("{}")
    (ds / "state.json").write_text('{"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}')
    result = make_shards("-i", ds, "--input-format", "hf", "-o", tmp_path / "out", "--max-seq-length", "32",
                         "--max-predictions-per-seq", "5")  # fmt: skip
    assert result.exit_code == 0, result.output
    statistics = json.loads((tmp_path / "out" / "manifest.json").read_text())["statistics"]
    assert statistics["files"] == 1 and statistics["formats"] == {"hf": 1}
