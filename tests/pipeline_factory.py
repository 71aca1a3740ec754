"""The tiny corpus of ``tests/fixtures/pipeline`` (two files, 30 documents, a small vocab) as the tests of
make-shards' Beam modules use it: the in-process test pipeline, a config, and the documents read and
tokenized by the plain functions that the composites adapt (their oracle)."""

from __future__ import annotations

from pathlib import Path

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline  # (not collected by pytest)

from bertprep.pipeline import readers
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.instances.bucket_files import ReadDocument, TokenizedDocument, encode_document
from bertprep.pipeline.masking.config import MaskingConfig
from bertprep.pipeline.text.tokenization import SentenceEncoder, load_vocab

FIXTURES = Path(__file__).parent / "fixtures" / "pipeline"
VOCAB = str(FIXTURES / "vocab.txt")
FILES = [str(FIXTURES / "a.txt"), str(FIXTURES / "b.txt")]
#: Beam options that run make-shards in the calling process, one in-memory worker (a test's CliRunner).
BEAM_IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def beam_pipeline() -> BeamTestPipeline:
    """The in-process runner, as make-shards' local default (no Prism download, one process)."""
    return BeamTestPipeline(runner=FnApiRunner(), options=PipelineOptions(["--direct_num_workers=1"]))


def shards_config(**kw) -> ShardsConfig:
    """Settings for the fixture corpus: buckets of 7 documents, seq 64, 3 shards; ``kw`` overrides."""
    base = dict(
        inputs=tuple(FILES),
        vocab=VOCAB,
        output_dir="unused",
        input_format="bert",
        bucket_size=7,
        instance=InstanceConfig(max_seq_length=64, dupe_factor=2, mlm=MaskingConfig(max_predictions_per_seq=10)),
        num_shards=3,
    )
    base.update(kw)
    return ShardsConfig(**base)


def documents() -> list[ReadDocument]:
    """``(file_index, ordinal, sentences)`` of every fixture document, in id order."""
    return [
        ReadDocument(i, d.ordinal, list(d.sentences))
        for i, path in enumerate(FILES)
        for d in readers.read_documents(path, "bert")
    ]


def tokenized() -> list[TokenizedDocument]:
    """:func:`documents` encoded (``bucket_files.encode_document``, lower-cased)."""
    encoder = SentenceEncoder(load_vocab(VOCAB), True)
    return [encode_document(encoder, i, ordinal, sentences) for i, ordinal, sentences in documents()]


def make_shards_args(out: str | Path, *extra: str, inputs: str = ",".join(FILES), num_shards: int = 2) -> list[str]:
    """The arguments of ``bertprep make-shards`` on ``inputs`` (default: the fixture corpus) into ``out``: seq 64,
    10 predictions a row, dupe factor 2, ``num_shards`` shards, ``-q``, then ``extra``, then
    :data:`BEAM_IN_PROCESS`."""
    return [
        "make-shards", "-i", inputs, "--vocab", VOCAB, "-o", str(out), "--max-seq-length", "64",
        "--max-predictions-per-seq", "10", "--dupe-factor", "2", "--num-shards", str(num_shards), "-q", *extra,
        *BEAM_IN_PROCESS,
    ]  # fmt: skip


def make_shards(out: str | Path, *extra: str, **kw):
    """Run ``bertprep make-shards`` (:func:`make_shards_args`) in this process; returns click's ``Result``."""
    from click.testing import CliRunner

    from bertprep.cli.main import cli

    return CliRunner().invoke(cli, make_shards_args(out, *extra, **kw), catch_exceptions=False)


class PipelineOutputReplayed:
    """For tests that cut make-shards' publish at each of its steps in turn, one run per step: the first run's
    pipeline output (its staging folder, just before the publish) is kept, and the later runs put a copy of
    it in their own staging folder instead of running the same pipeline again; so each run still locks, repairs,
    stages, publishes and is cut as a real run, on the same files, but costs a copy instead of a pipeline
    (the pipeline is deterministic; its bytes are tested elsewhere). ``copy(source, target)`` copies a folder
    (``shutil.copytree``, or object by object on a bucket). Use :meth:`patch` inside each run's
    ``MonkeyPatch`` context."""

    def __init__(self, saved: str, copy):
        self.saved, self.copy, self.kept = saved, copy, False

    def patch(self, monkeypatch) -> None:
        import apache_beam as beam

        from bertprep.pipeline.beam import run

        real_build, real_publish = run.build_pipeline, run._publish

        def build(pipeline, config, files, vocab, staging_dir, spill_to):
            if not self.kept:
                return real_build(pipeline, config, files, vocab, staging_dir, spill_to)
            self.copy(self.saved, staging_dir)
            return pipeline | "replayed" >> beam.Create([None])

        def publish_kept(config, staging_dir, manifest):
            if not self.kept:
                self.copy(staging_dir, self.saved)
                self.kept = True
            return real_publish(config, staging_dir, manifest)

        monkeypatch.setattr(run, "build_pipeline", build)
        monkeypatch.setattr(run, "_publish", publish_kept)
