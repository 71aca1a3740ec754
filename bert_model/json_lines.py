"""JSON-lines input files (one JSON object per line, jsonlines.org): the one reader of the tasks' and retrieval's
``.jsonl`` inputs (multiple-choice examples; BEIR corpus and query files; retrieval training pairs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def read_json_lines(path: str, keys: tuple[str, ...] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of every non-blank line of ``path``, in order (numbers from 1; UTF-8, a byte
    order mark at the start skipped).

    Raises:
        ValueError: ``PATH:LINE: ...`` for a line that is not JSON, not a JSON object, or an object without one
            of ``keys``.
    """
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not JSON ({err.msg}); expected one object per line") from None
            if not isinstance(record, dict) or not set(keys) <= record.keys():
                names = " with " + " and ".join(f'"{k}"' for k in keys) if keys else ""
                got = "" if isinstance(record, dict) else f", got {type(record).__name__}"
                raise ValueError(f"{path}:{number}: expected a JSON object{names}{got}")
            yield number, record
