"""The local runner's shuffle with a memory budget (``beam/spill.py``): documents beyond ``--memory-budget``
wait on disk, and the shards and manifests are byte for byte those of a run that kept them all in memory."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pytest
from apache_beam import coders, typehints

from beam_workers_factory import two_workers
from bertprep.pipeline.beam import spill
from bertprep.pipeline.beam.run import MakeShardsError, run_make_shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.instances.bucket_files import SpilledDocument, TokenizedDocument
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.readers import ranges
from conftest import FIXTURES

FIXTURES = FIXTURES / "pipeline"
ONE_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
TWO_WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
VARYING = ("created", "output_dir", "seconds", "inputs")  # manifest keys that name paths or times


def _config(out: Path, **kw) -> ShardsConfig:
    base = dict(
        inputs=(str(FIXTURES / "a.txt"), str(FIXTURES / "b.txt")),
        vocab=str(FIXTURES / "vocab.txt"),
        output_dir=str(out),
        instance=InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10)),
        input_format="bert",
        num_shards=3,
    )
    base.update(kw)
    return ShardsConfig(**base)


def _without_paths(value):
    if isinstance(value, dict):
        return {k: _without_paths(v) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list):
        return [_without_paths(v) for v in value]
    return value


def _outputs(out: Path) -> dict[str, object]:
    """Every file of a shard directory (held-out set included): bytes, the manifests without paths/times."""
    files = {}
    for p in sorted(out.rglob("*")):
        if p.is_file():
            name = str(p.relative_to(out))
            files[name] = _without_paths(json.loads(p.read_text())) if p.name == "manifest.json" else p.read_bytes()
    return files


def _spilled_bytes(caplog) -> list[float]:
    return [r.args[0] for r in caplog.records if r.getMessage().startswith("spilled ")]


@pytest.mark.parametrize(
    "options",
    [
        {},  # the defaults: buckets of word pieces
        pytest.param({"bucket_size": 7}, marks=pytest.mark.slow),
        pytest.param({"bucket_size": 0}, marks=pytest.mark.slow),  # one bucket: the original generator's
        pytest.param({"eval_fraction": 0.2, "dedup": "exact"}, marks=pytest.mark.slow),
        # files read in byte ranges: the ordinals are set after tokenizing, on the references too. 1,000-byte
        # ranges of these 32-37 KB files (documents of about 2 KB): ranges that start a document, ranges that
        # start none; 1-byte ranges (69,423 Beam elements, each opening its file) took a minute for the same
        pytest.param({"split_bytes": 1000, "bucket_size": 5}, marks=pytest.mark.slow),
    ],
    ids=["defaults", "bucket-size-7", "one-bucket", "heldout-dedup", "byte-ranges"],
)
@pytest.mark.slow  # 2-6 s a param on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_a_tiny_memory_budget_spills_and_gives_the_same_bytes(options, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=spill.__name__)
    caplog.set_level(logging.INFO, logger=ranges.__name__)
    run_make_shards(_config(tmp_path / "memory", memory_budget=1000, **options), ONE_WORKER)
    assert _spilled_bytes(caplog) == []  # all in memory
    if "split_bytes" in options:  # more ranges than the two files' 28 documents: some ranges start none
        (planned,) = [r.getMessage() for r in caplog.records if "byte ranges" in r.getMessage()]
        assert planned.startswith("2 input file(s) read in ") and int(planned.split()[-3]) > 28
    run_make_shards(_config(tmp_path / "disk", memory_budget=0, **options), TWO_WORKERS, workers=two_workers())
    spilled = _spilled_bytes(caplog)
    assert len(spilled) == 1 and spilled[0] > 0.05  # MB: every document went through the disk
    assert _outputs(tmp_path / "disk") == _outputs(tmp_path / "memory")
    left = [p.name for p in (tmp_path / "disk").iterdir() if p.name.startswith(".")]
    assert left == []  # no staging folder, no spill folder


def test_the_spill_log_names_the_folder_and_the_budget(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=spill.__name__)
    run_make_shards(_config(tmp_path / "out", memory_budget=0), ONE_WORKER)
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("spilled ")]
    assert f"{tmp_path / 'out'}/.bertprep-tmp-" in line and line.split(" (")[0].endswith("/spill")
    assert "--memory-budget 0 MB" in line


def test_the_budget_keeps_documents_in_memory_until_it_is_full(tmp_path):
    folder = str(tmp_path / "spill")
    doc = TokenizedDocument(0, 1, b"\x01\x00\x00\x00" * 100, b"\x64\x00\x00\x00", 0)  # 100 pieces: 404 bytes
    spiller = spill.Spiller(folder, budget_bytes=1000)
    kept = [spiller.keep(doc._replace(ordinal=k)) for k in range(4)]
    spiller.flush()
    assert [spill.is_spilled(d) for d in kept] == [False, False, True, True]
    assert kept[2].num_tokens == 100  # a reference carries its word pieces (for the token-sized buckets' plan)
    loaded = sorted(spill.load(kept))
    assert loaded == [doc._replace(ordinal=k) for k in range(4)]
    assert all(type(d) is TokenizedDocument for d in loaded)
    spiller.close()


def test_a_spilled_document_comes_back_with_its_word_starts(tmp_path):
    doc = TokenizedDocument(2, 7, b"\x05\x00\x00\x00" * 3, b"\x02\x00\x00\x00\x01\x00\x00\x00", 1, b"\x01\x00\x01")
    spiller = spill.Spiller(str(tmp_path / "spill"), budget_bytes=0)
    (ref,) = [spiller.keep(doc)]
    spiller.flush()
    assert spill.is_spilled(ref) and (ref.file_index, ref.ordinal, ref.num_tokens) == (2, 7, 3)
    assert spill.load([ref]) == [doc]
    spiller.close()


def test_documents_and_references_keep_their_type_through_beams_coder():
    """spill.load tells a reference from a document by its type, after the GroupByKey has coded both."""
    coder = coders.registry.get_coder(typehints.Tuple[int, typehints.Any])
    doc = TokenizedDocument(0, 3, b"\x05\x00\x00\x00", b"\x01\x00\x00\x00", 0)
    ref = SpilledDocument(0, 4, 1, "/spill/x.spill", 0, 40)
    for record in (doc, ref):
        (_, back) = coder.decode(coder.encode((9, record)))
        assert back == record and type(back) is type(record)


def test_a_full_disk_while_spilling_is_one_line_naming_the_folder(tmp_path, monkeypatch):
    def full_disk(path, mode):
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(spill, "open", full_disk, raising=False)
    out = tmp_path / "out"
    with pytest.raises(MakeShardsError) as err:
        run_make_shards(_config(out, memory_budget=0), ONE_WORKER)  # in this process: the patch applies
    message = str(err.value)
    assert "\n" not in message and "No space left on device" in message
    assert f"cannot spill tokenized documents to {out}/.bertprep-tmp-" in message and "/spill (" in message
    assert not out.exists() or [p.name for p in out.iterdir()] == []  # the staging folder is gone
