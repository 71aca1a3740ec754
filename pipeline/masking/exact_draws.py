"""The original's ``random.Random`` draws, draw for draw, with fewer Python-level calls.

``make-shards --sampling exact`` must draw from CPython's ``random.Random`` exactly what google-research/bert
``create_pretraining_data.py`` draws (``tests/test_golden.py``). Its hottest draws are shuffles (the document
list, the masking candidates of every instance, the final instance list) and ``randint``. The shortcuts here
make the same draws in the same order, and each is checked once at import against the interpreter's own
``random.Random`` (CPython 3.x passes); where a check fails, or for a subclass of ``random.Random``, the
plain method is called instead:

* :func:`shuffle`: ``rng.shuffle(x)`` (masking candidates, documents, instances);
* :func:`shuffle_first`: the first ``k`` of ``rng.shuffle(list(range(n)))`` (the masked positions of an
  instance, the pipeline's array path);
* :func:`randbelow_of`: ``n -> rng.randint(0, n - 1)`` as one call.

Python standard library only: the masking modules (imported by ``bertprep.bert_model``) and the instance
algorithm (``bucket_instances.py``, ``tests/reference/instances.py``) share it.
"""

from __future__ import annotations

import random
from collections.abc import Callable

_BITS = [0] + [n.bit_length() for n in range(1, 1 << 12)]


def _shuffle_inlined(x: list, rng: random.Random) -> None:
    """``rng.shuffle(x)``, draw for draw, without a Python-level ``_randbelow`` call per element.

    CPython's ``Random.shuffle`` swaps ``x[i]`` with ``x[_randbelow(i + 1)]`` for i from the end, and
    ``_randbelow(n)`` takes ``getrandbits(n.bit_length())`` until it is below ``n`` (``random.py``,
    ``_randbelow_with_getrandbits``). This is that loop inlined: about half the time of ``rng.shuffle``
    for the ~125 masking candidates of a 128-token instance (the hottest loop of the algorithm).
    """
    getrandbits = rng.getrandbits
    bits = _BITS
    for i in range(len(x) - 1, 0, -1):
        n = i + 1
        k = bits[n] if n < 4096 else n.bit_length()
        j = getrandbits(k)
        while j >= n:
            j = getrandbits(k)
        x[i], x[j] = x[j], x[i]


def _inlined_shuffle_matches() -> bool:
    """Check once that this interpreter's ``Random.shuffle`` is the loop above (CPython 3.x is)."""
    for size in (0, 1, 2, 7, 125, 5000):
        a, b = list(range(size)), list(range(size))
        ra, rb = random.Random(size), random.Random(size)
        ra.shuffle(a)
        _shuffle_inlined(b, rb)
        if a != b or ra.random() != rb.random():
            return False
    return True


_INLINED_SHUFFLE_OK = _inlined_shuffle_matches()


def shuffle(x: list, rng: random.Random) -> None:
    """Shuffle ``x`` in place exactly as ``rng.shuffle(x)`` (faster for a plain ``random.Random``)."""
    if _INLINED_SHUFFLE_OK and type(rng) is random.Random:
        _shuffle_inlined(x, rng)
    else:
        rng.shuffle(x)


def shuffle_first(n: int, k: int, rng: random.Random) -> list[int]:
    """``x = list(range(n)); rng.shuffle(x); return x[:k]``, draw for draw.

    CPython's ``shuffle`` swaps ``x[i]`` with ``x[j]``, ``j = _randbelow(i + 1)``, for i from the end;
    ``_randbelow(m)`` takes ``getrandbits(m.bit_length())`` until it is below ``m``. Here the steps are
    grouped by that bit length (constant within a group, so no per-step ``bit_length``), and a step
    ``i >= k`` only moves ``x[i]`` to ``j`` (position ``i`` is final and not returned). About 20% faster
    than the plain inlined loop; checked against ``random.shuffle`` at import (:data:`_FAST_DRAWS_OK`).
    """
    x = list(range(n))
    if not (_FAST_DRAWS_OK and type(rng) is random.Random):
        rng.shuffle(x)
        return x[:k]
    getrandbits = rng.getrandbits
    i = n - 1
    while i >= 1:
        b = (i + 1).bit_length()
        low = (1 << (b - 1)) - 1  # the smallest i of this group: i + 1 == 2 ** (b - 1)
        if low < 1:
            low = 1
        stop = k if k > low else low
        for s in range(i, stop - 1, -1):  # i >= k: only x[j] changes
            j = getrandbits(b)
            while j > s:
                j = getrandbits(b)
            x[j] = x[s]
        for s in range(min(i, stop - 1), low - 1, -1):  # i < k: a real swap
            j = getrandbits(b)
            while j > s:
                j = getrandbits(b)
            x[s], x[j] = x[j], x[s]
        i = low - 1
    return x[:k]


def randbelow_of(rng: random.Random) -> Callable[[int], int]:
    """``n -> rng.randint(0, n - 1)``, the same draw: ``randint(a, b)`` is ``a + _randbelow(b - a + 1)``, so
    for a plain ``random.Random`` this is ``rng._randbelow`` (one Python frame instead of three; checked at
    import, :data:`_FAST_DRAWS_OK`)."""
    if _FAST_DRAWS_OK and type(rng) is random.Random:
        return rng._randbelow  # type: ignore[attr-defined]  # CPython's, checked at import (_FAST_DRAWS_OK)
    return lambda n: rng.randint(0, n - 1)


def _fast_draws_match() -> bool:
    """Check once that this interpreter's ``Random`` draws as the shortcuts here assume (CPython 3.x
    does): ``shuffle`` is the loop of :func:`shuffle_first`, and ``randint(a, b)`` is
    ``a + _randbelow(b - a + 1)``."""
    for size in (0, 1, 2, 3, 7, 64, 65, 125, 300):
        for k in (0, 1, 20, size):
            ra, rb = random.Random(size * 31 + k), random.Random(size * 31 + k)
            x = list(range(size))
            ra.shuffle(x)
            if x[:k] != shuffle_first(size, k, rb) or ra.random() != rb.random():
                return False
    ra, rb = random.Random(5), random.Random(5)
    for n in (1, 2, 3, 100, 30522, 2**31):
        below = rb._randbelow  # type: ignore[attr-defined]  # CPython's private draw, the point of the check
        if [ra.randint(0, n - 1) for _ in range(50)] != [below(n) for _ in range(50)]:
            return False
    return ra.random() == rb.random()


_FAST_DRAWS_OK = True  # set for the check below, which uses the fast path
_FAST_DRAWS_OK = _fast_draws_match()


__all__ = ["randbelow_of", "shuffle", "shuffle_first"]
