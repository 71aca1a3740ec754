"""``--sampling auto`` (the default): exact sampling with one bucket (``--bucket-size 0``, the original's output),
fast sampling with any other bucketing; the mode used is recorded in the manifest and shown by ``inspect``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bertprep.cli.main import cli
from bertprep.pipeline.config import SAMPLING_MODES, InstanceConfig, ShardsConfig
from bertprep.pipeline.masking.config import MaskingConfig
from conftest import FIXTURES
from pipeline_factory import make_shards

FIXTURES = FIXTURES / "pipeline"
VOCAB = str(FIXTURES / "vocab.txt")
BEAM_IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def _config(**kw) -> ShardsConfig:
    return ShardsConfig(inputs=("x.txt",), vocab=VOCAB, output_dir="out", **kw)


@pytest.mark.parametrize(
    "sampling, bucket_size, used",
    [
        ("auto", None, "fast"),  # the default: token-sized buckets
        ("auto", 7, "fast"),
        ("auto", 0, "exact"),  # one bucket: the original generator's output
        ("exact", None, "exact"),
        ("exact", 7, "exact"),
        ("fast", 0, "fast"),
    ],
)
def test_auto_resolves_from_the_bucketing_and_explicit_modes_stay(sampling, bucket_size, used):
    config = _config(sampling=sampling, bucket_size=bucket_size)
    assert config.effective_sampling == used
    recorded = config.to_dict()
    assert recorded["sampling"] == used
    if sampling == "auto":
        assert recorded["sampling_requested"] == "auto"
    else:
        assert "sampling_requested" not in recorded


def test_auto_is_the_default_and_never_refuses_an_option_combination():
    assert ShardsConfig.__dataclass_fields__["sampling"].default == "auto" and "auto" in SAMPLING_MODES
    for objective in ("nsp", "sop", "none"):
        for scheme in ("token", "whole-word", "ngram", "span"):
            for masking in ("static", "dynamic"):
                for bucket_size in (None, 0):
                    config = _config(
                        instance=InstanceConfig(objective=objective, mlm=MaskingConfig(masking_scheme=scheme)),
                        masking=masking,
                        bucket_size=bucket_size,
                        pairing_scope="file",
                    )
                    assert config.effective_sampling == ("exact" if bucket_size == 0 else "fast")


def test_unknown_sampling_mode_is_refused():
    with pytest.raises(ValueError, match="sampling must be one of"):
        _config(sampling="quick")


def _run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _inputs(tmp_path: Path, copies: int = 2) -> str:
    """The two fixture files ``copies`` times under other names: 60 documents, so token buckets can be several
    (there are never fewer than 16 documents per bucket on average)."""
    paths = []
    for c in range(copies):
        for name in ("a.txt", "b.txt"):
            path = tmp_path / "in" / f"{c}-{name}"
            path.parent.mkdir(exist_ok=True)
            path.write_text((FIXTURES / name).read_text(encoding="utf-8"), encoding="utf-8")
            paths.append(str(path))
    return ",".join(paths)


def _make(tmp_path: Path, out: str, *extra: str) -> tuple[dict, dict[str, bytes]]:
    directory = tmp_path / out
    result = make_shards(
        directory, "--input-format", "bert", "--bucket-tokens", "3000", *extra, inputs=_inputs(tmp_path)
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((directory / "manifest.json").read_text())
    return manifest, {p.name: p.read_bytes() for p in sorted(directory.glob("shard-*.arrow"))}


@pytest.mark.slow  # ~6 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_default_is_fast_with_several_buckets_deterministic_and_recorded(tmp_path):
    manifest, default = _make(tmp_path, "default")
    assert manifest["statistics"]["buckets"] > 1
    assert manifest["config"]["sampling"] == "fast" and manifest["config"]["sampling_requested"] == "auto"
    again_manifest, again = _make(tmp_path, "again")
    assert default and again == default and again_manifest["statistics"] == manifest["statistics"]
    fast_manifest, fast = _make(tmp_path, "fast", "--sampling", "fast")
    assert fast == default  # auto really ran the fast mode, not only named it
    assert fast_manifest["config"]["sampling"] == "fast" and "sampling_requested" not in fast_manifest["config"]
    exact_manifest, exact = _make(tmp_path, "exact", "--sampling", "exact")
    assert exact != default and exact_manifest["config"]["sampling"] == "exact"
    shown = _run(["inspect", str(tmp_path / "default"), "-n", "0"])
    assert shown.exit_code == 0, shown.output
    assert "sampling=fast, sampling_requested=auto" in shown.output


@pytest.mark.slow  # ~5 s on 2 busy cores (make test runs it; make test-fast leaves it out)
def test_default_is_exact_with_one_bucket(tmp_path):
    manifest, default = _make(tmp_path, "default", "--bucket-size", "0")
    assert manifest["statistics"]["buckets"] == 1
    assert manifest["config"]["sampling"] == "exact" and manifest["config"]["sampling_requested"] == "auto"
    _, exact = _make(tmp_path, "exact", "--bucket-size", "0", "--sampling", "exact")
    assert default and exact == default  # the original's stream: the golden tests' mode
    _, fast = _make(tmp_path, "fast", "--bucket-size", "0", "--sampling", "fast")
    assert fast != default
