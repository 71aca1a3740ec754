"""Local inputs are listed and opened without Beam (``readers/local_files.py``) exactly as Beam's ``FileSystems``
lists and opens them: the same files, sizes, order, glob rules, skipped hidden/README files, compression and error
messages; and build-vocab on a local corpus does not import Beam at all."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import pytest
import zstandard
from apache_beam.io.filesystems import FileSystems

from bertprep.pipeline.readers import InputError, expand_inputs, files, local_files, ranges

#: Glob forms, relative to the tree's root: * (not across /), ** (across), ? (any one character, / too),
#: [...] and [!...], an unclosed [, a trailing /, a plain file, folder, missing path, links.
PATTERNS = [
    "*",
    "*.txt",
    "*.TXT",
    "**",
    "**.txt",
    "**/*.txt",
    "**/.*",
    "*/*.txt",
    "su*/deeper/*",
    "sub/*",
    "sub/**",
    "sub/",
    "sub",
    "?.txt",
    "sub?c.txt",
    "sub?deeper?d.txt",
    "[ab].txt",
    "[!a].txt",
    "[a-c]*",
    "sub[/]c.txt",
    "x[1].txt",
    "x[[]1].txt",
    "[unclosed",
    "a.txt",
    "x[1].txt/",
    "missing.txt",
    "missing/*",
    "link_dir",
    "link_dir/*",
    "link_file",
    "broken",
    "broke*",
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A corpus folder with hidden files, README files, nested folders, a name with glob characters, an empty and
    a compressed file, and symbolic links (to a folder, to a file, to nothing)."""
    root = tmp_path_factory.mktemp("corpus")
    texts = {
        "a.txt": "First sentence.\n",
        "b.txt": "Second one, a bit longer.\n",
        "c.md": "Third.\n",
        "x[1].txt": "Brackets in the name.\n",
        "empty.txt": "",
        ".hidden.txt": "hidden\n",
        "README.md": "about\n",
        ".git/config": "[core]\n",
        "sub/c.txt": "Nested.\n",
        "sub/readme.txt": "about the sub folder\n",
        "sub/.cache/e.txt": "hidden folder\n",
        "sub/.dotfile": "hidden file\n",
        "skipped/.hidden.txt": "hidden\n",
        "skipped/README": "about\n",
        "sub/deeper/d.txt": "Deeper still.\n",
    }
    for rel, text in texts.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "sub/deeper/f.txt.gz").write_bytes(gzip.compress(b"Compressed.\n"))
    (root / "sub/deeper/g.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(b"Zstandard.\n"))
    os.symlink(root / "sub", root / "link_dir")
    os.symlink(root / "a.txt", root / "link_file")
    os.symlink(root / "nowhere", root / "broken")
    return root


def _beam_match(pattern: str) -> list[tuple[str, int]]:
    return sorted((m.path, m.size_in_bytes) for m in FileSystems.match([pattern])[0].metadata_list)


@pytest.fixture
def through_beam(monkeypatch):
    """Every path read through Beam's ``FileSystems``, as before local paths had their own way."""
    monkeypatch.setattr(local_files, "is_beam_local", lambda path: False)


@pytest.mark.filterwarnings("ignore:Possible nested set:FutureWarning")  # ([[]: Beam's regular expression warns too)
def test_the_local_listing_is_beams_for_every_glob_form(tree):
    for pattern in PATTERNS:
        full = f"{tree}/{pattern}"
        assert sorted(local_files.match(full)) == _beam_match(full), pattern
    # each form is exercised: matches and non-matches both occur
    assert [p for p in PATTERNS if not _beam_match(f"{tree}/{p}")] == [
        "*.TXT", "x[1].txt", "[unclosed", "x[1].txt/", "missing.txt", "missing/*", "broken", "broke*"
    ]  # fmt: skip
    assert _beam_match(f"{tree}/sub?c.txt") == [(f"{tree}/sub/c.txt", 8)]  # ? crosses /, * does not
    assert _beam_match(f"{tree}/sub[/]c.txt") == [(f"{tree}/sub/c.txt", 8)]  # so does a [...] class
    assert _beam_match(f"{tree}/x[[]1].txt") == [(f"{tree}/x[1].txt", 22)]  # (no escapes: [[] is a "[")
    assert f"{tree}/sub/c.txt" not in dict(_beam_match(f"{tree}/*.txt"))


def test_relative_patterns_are_listed_as_beam_lists_them(tree, monkeypatch):
    monkeypatch.chdir(tree)
    for pattern in ["*.txt", "./*.txt", "sub/*.txt", "sub/**", "a.txt", "sub/", "./sub"]:
        assert sorted(local_files.match(pattern)) == _beam_match(pattern), pattern
    assert local_files.match("*.txt") == []  # (no folder before the glob: Beam lists nothing either)


def _expanded(patterns: str) -> list[str] | str:
    try:
        return expand_inputs(patterns)
    except InputError as err:
        return f"InputError: {err}"


@pytest.mark.filterwarnings("ignore:Possible nested set:FutureWarning")
def test_expand_inputs_gives_what_it_gave_through_beam(tree, monkeypatch):
    cases = [f"{tree}/{p}" for p in PATTERNS] + [str(tree), f"{tree}/", f"{tree}/sub/deeper,{tree}/*.txt"]
    cases += [f"{tree}/.git", f"{tree}/skipped", f"{tree}/empty.txt"]  # a hidden folder named; all skipped; empty
    (tree / "nothing").mkdir(exist_ok=True)
    cases.append(f"{tree}/nothing")  # an empty folder
    local = [_expanded(p) for p in cases]
    with monkeypatch.context() as m:
        m.setattr(local_files, "is_beam_local", lambda path: False)
        assert [_expanded(p) for p in cases] == local
    # the folder: recursive, sorted, hidden files and README* skipped, a link to a file listed, to a folder not
    assert local[len(PATTERNS)] == [
        f"{tree}/{rel}"
        for rel in ["a.txt", "b.txt", "c.md", "empty.txt", "link_file", "sub/c.txt", "sub/deeper/d.txt"]
        + ["sub/deeper/f.txt.gz", "sub/deeper/g.txt.zst", "x[1].txt"]
    ]
    errors = dict(zip(cases, local, strict=True))
    assert errors[f"{tree}/.git"] == [f"{tree}/.git/config"]  # (hidden: a part of the path under the folder named)
    for path, message in [
        ("missing.txt", "input file {!r} not found; check the path (globs and directories are accepted)"),
        ("missing/*", "input pattern {!r} matches no file; check the path and the glob"),
        ("nothing", "input directory {!r} holds no readable file (hidden files and README* are skipped)"),
        ("skipped", "input directory {!r} holds no readable file (hidden files and README* are skipped)"),
        ("empty.txt", "all 1 input files are empty (0 bytes): {}"),
    ]:
        assert errors[f"{tree}/{path}"] == "InputError: " + message.format(f"{tree}/{path}")


def _opened(path: str, compression_type: str) -> bytes | str:
    try:
        with files._open(path, compression_type) as fh:
            return fh.read()
    except InputError as err:
        return f"InputError: {err}"


def _sizes_and_reads(tree) -> tuple:
    names = ["a.txt", "empty.txt", "x[1].txt", "link_file", "sub/deeper/f.txt.gz", "sub/deeper/g.txt.zst", "sub"]
    paths = [f"{tree}/{name}" for name in names] + [f"{tree}/missing.txt"]
    opened = [_opened(p, c) for p in paths for c in ("auto", "uncompressed")]
    with files.open_input(f"{tree}/sub/deeper/g.txt.zst") as fh:  # (zstandard without Beam's module)
        zst = fh.read()
    return ranges._sizes(paths), opened, zst


def test_sizes_and_opened_bytes_are_beams(tree, monkeypatch):
    local = _sizes_and_reads(tree)
    with monkeypatch.context() as m:
        m.setattr(local_files, "is_beam_local", lambda path: False)
        assert _sizes_and_reads(tree) == local
    sizes, opened, zst = local
    # x[1].txt is asked for as a pattern (no match: size 0, read whole), a folder has its own size, a missing file 0
    assert sizes[:4] == [16, 0, 0, 16] and sizes[-2] == os.path.getsize(tree / "sub") and sizes[-1] == 0
    assert opened[0] == opened[1] == b"First sentence.\n"
    gz = tree / "sub/deeper/f.txt.gz"
    assert opened[8:10] == [b"Compressed.\n", gz.read_bytes()]  # auto: decompressed (by Beam), uncompressed: as stored
    assert zst == b"Zstandard.\n"
    assert opened[-1] == opened[-2] == f"InputError: input file {f'{tree}/missing.txt'!r} not found; check the path"
    assert opened[-3].startswith(f"InputError: cannot open input file {f'{tree}/sub'!r}: [Errno 21] Is a directory")


def test_the_index_of_a_local_multistream_dump_is_found_as_through_beam(tmp_path, monkeypatch):
    dump = tmp_path / "enwiki-20240101-pages-articles-multistream.xml.bz2"
    dump.write_bytes(b"")
    (dump.parent / "enwiki-20240101-pages-articles-multistream-index.txt").write_text("0:1:A\n")
    found = ranges.wiki_index_of(str(dump))
    with monkeypatch.context() as m:
        m.setattr(local_files, "is_beam_local", lambda path: False)
        assert ranges.wiki_index_of(str(dump)) == found
    assert found == str(dump.parent / "enwiki-20240101-pages-articles-multistream-index.txt")


_NO_BEAM = """
import atexit, sys
atexit.register(lambda: sys.stderr.write("apache_beam imported: %s\\n" % ("apache_beam" in sys.modules)))
from bertprep.cli.main import main
sys.argv = ["bertprep", *sys.argv[1:]]
main()
"""


def test_build_vocab_on_a_local_corpus_does_not_import_beam(tree, tmp_path):
    """Listing, opening and decompressing (gzip, zstd) local inputs: no Beam import (about 0.9 s of CPU)."""
    out = tmp_path / "vocab"
    command = [sys.executable, "-c", _NO_BEAM, "build-vocab", f"{tree}/sub", str(tree), "-o", str(out), "-q"]
    done = subprocess.run([*command, "--vocab-size", "200"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == "apache_beam imported: False"
    assert (out / "vocab.txt").exists()
