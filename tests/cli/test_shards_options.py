"""make-shards' command line turned into library objects (``cli/shards_options.py``): ``--source`` and
``--mixture`` parsed into sources, refused with the option named; Beam's pass-through arguments told apart
from mistyped ones."""

from __future__ import annotations

import json

import click
import pytest

from bertprep.cli.shards_options import mixture_sources, parse_source, unknown_beam_args
from bertprep.pipeline.config import Source


def test_source_options_parse_and_refuse_bad_values(tmp_path):
    s = parse_source("wiki=a/*.txt,b/*.txt:2.5")
    assert s == Source("wiki", ("a/*.txt", "b/*.txt"), 2.5)
    assert parse_source("web=gs://bucket/x*").inputs == ("gs://bucket/x*",)  # a ':' of the glob
    with pytest.raises(click.BadParameter, match="weight must be a finite number > 0") as err:
        parse_source("wiki=a.txt:0")
    assert err.value.param_hint == "--source"
    with pytest.raises(click.BadParameter, match="NAME=GLOBS"):
        parse_source("a.txt")
    spec = tmp_path / "mix.json"
    spec.write_text(
        json.dumps({"sources": [{"name": "a", "inputs": "x.txt", "weight": 0.5}], "temperature_alpha": 0.3})
    )
    sources, alpha = mixture_sources({"mixture": str(spec)})
    assert sources == (Source("a", ("x.txt",), 0.5),) and alpha == 0.3
    with pytest.raises(click.BadParameter, match="not both") as err:
        mixture_sources({"mixture": str(spec), "sources": ("a=x.txt",)})
    assert err.value.param_hint == "--mixture"


def test_beam_options_pass_and_mistyped_ones_are_found():
    assert (
        unknown_beam_args(
            [
                "--runner=DataflowRunner",
                "--project=p",
                "--region=us-central1",
                "--temp_location=gs://b/tmp",
                "--setup_file=./setup.py",
                "--direct_num_workers=1",
                "--experiments=use_runner_v2",
            ]
        )
        == []
    )
    assert unknown_beam_args(["--project=p", "--dupe-factr", "3"]) == ["--dupe-factr", "3"]
    with pytest.raises(ValueError, match="--runner=NoSuchRunner: Beam cannot create this runner"):
        unknown_beam_args(["--runner=NoSuchRunner"])
