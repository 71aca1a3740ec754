"""The original's ``random.Random`` draws made faster (``pipeline/masking/exact_draws.py``): each shortcut makes the
same draws as the plain method and leaves the generator at the same point, for ``random.Random`` and for a
subclass (which takes the plain method)."""

from __future__ import annotations

import random

import pytest

from bertprep.pipeline.masking.exact_draws import randbelow_of, shuffle, shuffle_first


class _Sub(random.Random):
    pass


@pytest.mark.parametrize("rng_type", [random.Random, _Sub])
@pytest.mark.parametrize("size", [0, 1, 2, 3, 5, 64, 125, 1000, 4095, 4096, 10000])
def test_shuffle_is_random_shuffle_draw_for_draw(rng_type, size):
    for seed in range(5):
        ours, ref = rng_type(seed), random.Random(seed)
        a, b = list(range(size)), list(range(size))
        shuffle(a, ours)
        ref.shuffle(b)
        assert a == b
        assert ours.random() == ref.random()  # the stream is left at the same point


@pytest.mark.parametrize("rng_type", [random.Random, _Sub])
def test_shuffle_first_is_the_head_of_random_shuffle(rng_type):
    """The masked positions of an instance: the first ``k`` of a shuffle of ``range(n)``, every draw made."""
    for n in (0, 1, 2, 3, 7, 63, 64, 65, 125, 509, 1000):
        for k in sorted({0, 1, min(20, n), n // 2, n}):
            ours, ref = rng_type(n * 1000 + k), random.Random(n * 1000 + k)
            x = list(range(n))
            ref.shuffle(x)
            assert shuffle_first(n, k, ours) == x[:k]
            assert ours.random() == ref.random()


@pytest.mark.parametrize("rng_type", [random.Random, _Sub])
def test_randbelow_of_draws_as_randint(rng_type):
    ours, ref = rng_type(3), random.Random(3)
    randbelow = randbelow_of(ours)
    for n in (1, 2, 3, 100, 30522, 2**31, 2**40):
        assert [randbelow(n) for _ in range(50)] == [ref.randint(0, n - 1) for _ in range(50)]
    assert ours.random() == ref.random()
