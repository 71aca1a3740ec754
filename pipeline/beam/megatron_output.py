"""``--output-format megatron``: the tokenized documents of a shard set -> Megatron parts in its staging folder
(:class:`WriteMegatronDocuments`), which ``shards/write.py``'s ``WriteManifestFn`` merges into one
``text_sentence.bin``/``.idx`` (``shards/formats.py``).

Megatron-LM's BERT dataset pairs and masks sentences itself at training time, so it reads the documents, not
bertprep's instances: one sequence per sentence and a document boundary after each document, as its
``tools/preprocess_data.py --split-sentences`` writes. The documents go in input order: by input file (its
path relative to the inputs' root, ``readers.input_keys``, so the bytes do not depend on where the corpus
lives), then by their index in the file; each run of :data:`DOCUMENTS_PER_PART` documents of a file makes one
part (a Beam group: a worker holds one part's documents, not a whole large file's), and the parts are merged in
that order. So the files are the same on every runner and any number of workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam

from bertprep.pipeline.errors import records_errors
from bertprep.pipeline.instances.bucket_files import TokenizedDocument
from bertprep.pipeline.shards import formats

#: Documents of one input file per Megatron part (the unit a worker holds and writes).
DOCUMENTS_PER_PART = 20_000


class WriteMegatronPartFn(beam.DoFn):
    """``((file_index, chunk), tokenized documents)`` (documents ``chunk * DOCUMENTS_PER_PART`` onwards of that
    file) -> its part in ``tmp_dir`` -> the part's entry, with ``key`` (the file's relative path, index and the
    chunk) for the merge order."""

    def __init__(self, tmp_dir: str, keys: Sequence[str], vocab_size: int):
        self.tmp_dir = tmp_dir
        self.keys = list(keys)
        self.vocab_size = vocab_size

    @records_errors("tmp_dir")
    def process(self, element: tuple[tuple[int, int], Iterable[TokenizedDocument]]) -> Iterator[dict]:
        (file_index, chunk), docs = element
        ordered = sorted(docs, key=lambda doc: doc.ordinal)  # (TokenizedDocument records of one file)
        part = f"part-{file_index:06d}-{chunk:06d}"
        entry = formats.write_megatron_documents(
            self.tmp_dir, part, [(d.input_ids, d.sentence_lengths) for d in ordered], self.vocab_size
        )
        entry["key"] = [self.keys[file_index], file_index, chunk]
        yield entry


class WriteMegatronDocuments(beam.PTransform):
    """Tokenized documents (``transforms.TokenizeDocuments``' elements, not spilled) -> Megatron parts of
    :data:`DOCUMENTS_PER_PART` documents of one input file in ``tmp_dir`` -> the parts' entries (for
    ``WriteArrowShards``' manifest step)."""

    def __init__(self, tmp_dir: str, keys: Sequence[str], vocab_size: int):
        super().__init__()
        self.tmp_dir = tmp_dir
        self.keys = keys
        self.vocab_size = vocab_size

    def expand(self, tokenized):
        return (
            tokenized
            | "KeyByFilePart" >> beam.Map(lambda doc: ((doc.file_index, doc.ordinal // DOCUMENTS_PER_PART), doc))
            | "GroupByFilePart" >> beam.GroupByKey()
            | "WriteMegatronPartFn" >> beam.ParDo(WriteMegatronPartFn(self.tmp_dir, self.keys, self.vocab_size))
        )
