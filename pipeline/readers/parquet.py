"""The ``parquet`` format: a string column of a Parquet file, read in record batches with pyarrow."""

from __future__ import annotations

from collections.abc import Iterator

from bertprep.pipeline.readers.base import InputError
from bertprep.pipeline.readers.context import ReadContext
from bertprep.pipeline.readers.files import _open

#: Rows per record batch read from a Parquet file.
PARQUET_BATCH_ROWS = 256


def read_parquet(ctx: ReadContext) -> Iterator[tuple[int, list[str]]]:
    """Documents from the string column ``text_field`` of a Parquet file, read in record batches.

    The text is prose, as for ``jsonl``. Document ``line`` is 0; ``bytes`` counts the UTF-8 text read.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with _open(ctx.path) as fh:
        try:
            parquet = pq.ParquetFile(fh)
        except (pa.ArrowException, OSError) as err:
            raise InputError(
                f"{ctx.path}: not a readable Parquet file ({err}); pass the right --input-format (or auto)"
            ) from err
        schema = parquet.schema_arrow
        if ctx.text_field not in schema.names:
            raise InputError(
                f"{ctx.path}: the Parquet file has no column {ctx.text_field!r} (its columns: "
                f"{', '.join(schema.names[:10])}); name the text column with --text-field"
            )
        check_string_column(ctx, schema)
        groups = None  # all row groups; a byte range reads the row groups that start in it
        if ctx.start > 0 or ctx.end is not None:
            groups = [
                i
                for i in range(parquet.num_row_groups)
                if ctx.start <= _row_group_offset(parquet, i) < (ctx.end or 1 << 62)
            ]
            if not groups:
                return
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[ctx.text_field], row_groups=groups):
            column = batch.column(0)
            ctx.stats.bytes += pc.sum(pc.binary_length(column)).as_py() or 0
            for text in column.to_pylist():
                sentences = ctx.segment(text) if text else []
                if sentences:
                    yield 0, sentences
                else:
                    ctx.skip_document("empty")


def check_string_column(ctx: ReadContext, schema) -> None:
    """Raise :class:`InputError` (naming the file and ``--text-field``) unless the column ``ctx.text_field`` of
    the Arrow ``schema`` (which has it) holds strings (``string``, ``large_string`` or ``string_view``)."""
    import pyarrow as pa

    column_type = schema.field(ctx.text_field).type
    if not (
        pa.types.is_string(column_type)
        or pa.types.is_large_string(column_type)
        or getattr(pa.types, "is_string_view", lambda t: False)(column_type)
    ):
        raise InputError(
            f"{ctx.path}: column {ctx.text_field!r} has type {column_type}, not string; name the text column "
            "with --text-field"
        )


def _row_group_offset(parquet, index: int) -> int:
    """The byte offset where row group ``index`` starts (its first column chunk's first page)."""
    column = parquet.metadata.row_group(index).column(0)
    offsets = [column.data_page_offset]
    if column.has_dictionary_page and column.dictionary_page_offset:
        offsets.append(column.dictionary_page_offset)
    return min(offsets)
