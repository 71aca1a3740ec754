"""The ``hf`` format: Hugging Face ``datasets`` on disk, read with pyarrow (no ``datasets`` at run time).

Two layouts, one reader per file (so a dataset splits by file like any other input):

* a directory written by ``Dataset.save_to_disk``: ``data-0000N-of-0000M.arrow`` files (Arrow IPC *stream*
  format, as ``datasets`` writes them) beside ``dataset_info.json`` and ``state.json``; a ``DatasetDict``
  has one such directory per split (pass the split's directory, or the whole and every split is read);
* the files of a dataset downloaded from the Hub: ``*.parquet`` (most datasets) or ``*.arrow`` (the IPC
  *file* format is read too).

The metadata files (:data:`HF_METADATA_FILES`) hold no documents and are passed over. Each row's string
column ``text_field`` is one document (prose, as ``jsonl``); record batches are read one at a time. A
document's id is ``(file, row)``: ``Document.line`` is the row's 1-based number in its file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from bertprep.pipeline.readers.base import InputError
from bertprep.pipeline.readers.context import ReadContext
from bertprep.pipeline.readers.files import _open
from bertprep.pipeline.readers.parquet import check_string_column

#: Files of a ``save_to_disk`` directory that describe the dataset rather than hold rows.
HF_METADATA_FILES = ("dataset_info.json", "state.json", "dataset_dict.json")
#: Rows per record batch read from a Parquet file (Arrow files keep the batches they were written with).
HF_PARQUET_BATCH_ROWS = 256
_ARROW_FILE_MAGIC = b"ARROW1"


def is_hf_metadata(path: str) -> bool:
    return os.path.basename(path) in HF_METADATA_FILES


def _batches(path: str, fh, text_field: str):
    """``(schema, iterator of record batches of the text column)`` of an Arrow (stream or file) or Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    head = fh.read(len(_ARROW_FILE_MAGIC))
    fh.seek(0)
    if head[:4] == b"PAR1":
        parquet = pq.ParquetFile(fh)
        schema = parquet.schema_arrow
        columns = [text_field] if text_field in schema.names else None
        return schema, parquet.iter_batches(batch_size=HF_PARQUET_BATCH_ROWS, columns=columns)
    if head == _ARROW_FILE_MAGIC:
        reader = pa.ipc.open_file(fh)
        return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
    reader = pa.ipc.open_stream(fh)  # what datasets' save_to_disk writes
    return reader.schema, iter(reader)


def read_hf(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
    """Documents from the string column ``text_field`` of one file of a Hugging Face dataset (module docstring).

    ``line`` is the row's 1-based number in the file; ``bytes`` counts the UTF-8 text read.

    Raises:
        InputError: not an Arrow or Parquet file; no column ``text_field`` (the message lists the columns);
            a column that is not text.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if is_hf_metadata(ctx.path):
        return
    with _open(ctx.path) as fh:
        try:
            schema, batches = _batches(ctx.path, fh, ctx.text_field)
        except (pa.ArrowException, OSError) as err:
            raise InputError(
                f"{ctx.path}: not an Arrow or Parquet file of a Hugging Face dataset ({err}); --input-format hf "
                "reads the .arrow files of a save_to_disk directory and the .arrow/.parquet files of a Hub dataset"
            ) from err
        if ctx.text_field not in schema.names:
            raise InputError(
                f"{ctx.path}: the dataset has no column {ctx.text_field!r} (its columns: {', '.join(schema.names)}); "
                "name the text column with --text-field"
            )
        check_string_column(ctx, schema)
        row = 0
        for batch in batches:
            column = batch.column(batch.schema.get_field_index(ctx.text_field))
            ctx.stats.bytes += pc.sum(pc.binary_length(column)).as_py() or 0
            for text in column.to_pylist():
                row += 1
                sentences = ctx.segment(text) if text else []
                if sentences:
                    yield row, sentences
                else:
                    ctx.skip_document("empty")
