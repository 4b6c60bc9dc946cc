"""A response's usage is the sum of its rounds'."""

from stateway.core.usage import Usage


def test_add_sums_every_count() -> None:
    usage = Usage(10, 20, cached_tokens=3, reasoning_tokens=4, cache_write_tokens=5)
    usage.add(Usage(1, 2, 1, 2, 7))
    assert usage == Usage(11, 22, cached_tokens=4, reasoning_tokens=6, cache_write_tokens=12)
    assert usage.total_tokens == 33
