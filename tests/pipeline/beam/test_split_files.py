"""make-shards with files read in byte ranges (``ShardsConfig.split_bytes``, ``readers.ranges``): the shards
and the manifest are byte-identical to a run that reads every file whole, for each format that splits."""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from pathlib import Path

import pytest

from bertprep.pipeline.beam.run import run_make_shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.readers.ranges import plan_ranges

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "readers"))
from test_ranges import _parquet, multistream_dump

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def _digests(out: Path) -> dict[str, str]:
    """sha256 of every output file; a manifest's with its ``output_dir`` (the one thing meant to differ) out."""
    digests = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            if path.name == "manifest.json":
                data = data.replace(json.dumps(str(out)).encode(), b'"OUT"')
            digests[str(path.relative_to(out))] = hashlib.sha256(data).hexdigest()
    return digests


def _make_shards(tmp_path: Path, inputs: list[str], name: str, vocab: Path, **kw) -> dict[str, str]:
    out = tmp_path / name
    config = ShardsConfig(
        inputs=tuple(inputs),
        vocab=str(vocab),
        output_dir=str(out),
        instance=InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10)),
        **kw,
    )
    run_make_shards(config, IN_PROCESS)
    return _digests(out)


#: The excerpts' size: about a third of the 1 MB Wikipedia files, still cut into about 85 ranges of 4,096 bytes.
EXCERPT_BYTES = 350_000
#: The end of a document, by format (an excerpt ends with one).
DOCUMENT_ENDS = {"wikiextractor": b"</doc>\n", "jsonl": b"\n"}


def _excerpt(source: Path, fmt: str, tmp_path: Path) -> str:
    """``source``'s first whole documents of about :data:`EXCERPT_BYTES` (``source`` itself when not twice that:
    golden/wiki8.txt's 370 KB stay whole), so each of a test's three runs tokenizes a third of a 1 MB file;
    asserts that 4,096-byte ranges still cut it into more than 80."""
    data = source.read_bytes()
    if len(data) <= 2 * EXCERPT_BYTES:
        return str(source)
    end = DOCUMENT_ENDS[fmt]
    excerpt = tmp_path / f"excerpt-{source.name}"
    excerpt.write_bytes(data[: data.index(end, EXCERPT_BYTES) + len(end)])
    assert len(plan_ranges([str(excerpt)], 4096)) > 80
    return str(excerpt)


def _same_with_tiny_ranges(tmp_path, inputs, vocab, **kw):
    whole = _make_shards(tmp_path, inputs, "whole", vocab, split_bytes=0, **kw)
    default = _make_shards(tmp_path, inputs, "default", vocab, **kw)
    tiny = _make_shards(tmp_path, inputs, "tiny", vocab, split_bytes=4096, **kw)
    assert any(name.endswith(".arrow") or "shard" in name for name in whole)
    assert default == whole
    assert tiny == whole


@pytest.mark.parametrize(
    "fmt,relative",
    [
        ("bert", "golden/wiki8.txt"),
        ("wikiextractor", "wikipedia/wikiextractor-featured/AA/wiki_01"),
        ("jsonl", "wikipedia/wikiextractor-json/wiki_00"),
    ],
)
@pytest.mark.slow  # ~7 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_line_formats_give_the_same_shards_in_ranges(shared_data, uncased_vocab, tmp_path, fmt, relative):
    inputs = [_excerpt(shared_data / relative, fmt, tmp_path)]
    _same_with_tiny_ranges(tmp_path, inputs, uncased_vocab, input_format=fmt)


@pytest.mark.slow  # ~12 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_one_bucket_and_dedup_and_eval_split_are_unchanged(shared_data, uncased_vocab, tmp_path):
    inputs = [str(shared_data / "golden" / "wiki8.txt"), str(shared_data / "golden" / "edge.txt")]
    _same_with_tiny_ranges(tmp_path, inputs, uncased_vocab, input_format="bert", bucket_size=0)
    inputs = [_excerpt(shared_data / "wikipedia" / "wikiextractor-json" / "wiki_00", "jsonl", tmp_path)]
    _same_with_tiny_ranges(
        tmp_path / "dedup", inputs, uncased_vocab, input_format="jsonl", dedup="exact", eval_fraction=0.2
    )


@pytest.mark.slow  # ~5 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_parquet_gives_the_same_shards_in_row_group_ranges(uncased_vocab, tmp_path):
    texts = [f"Row {i} says hello to the reader. Then it ends with a word number {i * 7}." for i in range(600)]
    path = _parquet(tmp_path / "t.parquet", texts, row_group_size=40)
    _same_with_tiny_ranges(tmp_path, [str(path)], uncased_vocab, input_format="parquet")


@pytest.mark.slow  # ~11 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_multistream_dump_gives_the_same_shards_in_stream_ranges(shared_data, uncased_vocab, tmp_path):
    dump, _ = multistream_dump(shared_data / "wikipedia" / "enwiki-table-markup.xml.bz2", tmp_path, copies=2)
    _same_with_tiny_ranges(tmp_path, [str(dump)], uncased_vocab, input_format="wiki-xml")


@pytest.mark.slow  # ~4 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_gzip_inputs_are_read_whole_and_said_once(uncased_vocab, tmp_path, caplog):
    import gzip

    inputs = []
    for i in range(2):
        path = tmp_path / f"part{i}.txt.gz"
        text = "".join(f"Sentence {j} of part {i} is here.\n" + ("\n" if j % 5 == 4 else "") for j in range(400))
        path.write_bytes(gzip.compress(text.encode()))
        inputs.append(str(path))
    with caplog.at_level(logging.WARNING):
        split = _make_shards(tmp_path, inputs, "split", uncased_vocab, input_format="bert", split_bytes=64)
    messages = [r.getMessage() for r in caplog.records if "cannot be split" in r.getMessage()]
    assert len(messages) == 1 and "2 input file(s)" in messages[0] and "gzip" in messages[0]
    assert split == _make_shards(tmp_path, inputs, "whole", uncased_vocab, input_format="bert", split_bytes=0)
