"""Every JSON bertprep writes, as strict JSON (RFC 8259): ``dumps`` and ``dump`` (standard library only).

Python's ``json`` writes ``NaN``, ``Infinity`` and ``-Infinity`` by default (``allow_nan=True``), which no
strict reader accepts (``jq``, JavaScript's ``JSON.parse``, Go, Rust's serde): a ``glue.json`` with an
``Infinity`` learning rate in it is not JSON. Here they are refused, in one ``ValueError`` that names the
value's place (``runs[0].setting.learning_rate``) and, when given, the file. ``tests/test_layout.py`` checks
that the package writes JSON through this module only.
"""

from __future__ import annotations

import json
import math
from typing import IO, Any


def _non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """The place (``a.b[2]``) and value of the first NaN or infinite float in ``value``, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (where or "the value", value)
    if isinstance(value, dict):
        items: Any = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for place, item in items:
        found = _non_finite(item, place)
        if found is not None:
            return found
    return None


def _refuse(value: Any, what: str | None) -> ValueError:
    found = _non_finite(value)
    place, bad = found if found is not None else ("a value", math.nan)
    return ValueError(
        f"{what + ': ' if what else ''}{place} is {bad}, which JSON cannot hold (no NaN or Infinity); "
        "nothing was written"
    )


def dumps(value: Any, *, what: str | None = None, **kwargs: Any) -> str:
    """``json.dumps(value, **kwargs)`` with ``allow_nan=False``.

    Args:
        what: the file or record, for the message (``"glue.json"``).
    Raises:
        ValueError: ``value`` holds a NaN or infinite float (the message names its place); ``TypeError`` as
            ``json.dumps`` for a value of another type.
    """
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:
        raise _refuse(value, what) from None


def dump(value: Any, fp: IO[str], *, what: str | None = None, **kwargs: Any) -> None:
    """``json.dump(value, fp, **kwargs)`` with ``allow_nan=False``; the text is made before the first byte is
    written, so a refused value leaves ``fp`` untouched. Raises as :func:`dumps`."""
    fp.write(dumps(value, what=what, **kwargs))
