"""The key cache: answers within its TTL without the store, asks again after it,
shares one lookup between concurrent misses, and stays bounded, unknown keys apart."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.errors import StorageError
from stateway.identity.key_cache import MAX_ENTRIES, KeyCache
from stateway.identity.keys import ApiKey


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Store:
    def __init__(self) -> None:
        self.keys: dict[str, ApiKey] = {}
        self.lookups: list[str] = []
        self.gate: asyncio.Event | None = None
        self.failing = False

    async def add(self, key: ApiKey) -> None:
        self.keys[key.digest] = key

    async def find(self, digest: str) -> ApiKey | None:
        self.lookups.append(digest)
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise StorageError("Storage failed while looking up an API key.")
        return self.keys.get(digest)

    async def list(self) -> list[ApiKey]:
        return list(self.keys.values())

    async def revoke(self, key_id: str, now: float) -> ApiKey | None:
        return None


def key(digest: str, revoked_at: float | None = None) -> ApiKey:
    return ApiKey(f"key_{digest}", "t", None, digest, 0.0, revoked_at=revoked_at)


async def test_an_answer_is_kept_for_the_ttl_then_asked_again() -> None:
    store, clock = Store(), Clock()
    cache = KeyCache(store, 2.0, clock=clock)
    await store.add(key("d1"))

    assert await cache.find("d1") == key("d1")
    store.keys["d1"] = key("d1", revoked_at=1.0)  # revoked by another process
    clock.now = 1.9
    assert (await cache.find("d1")) == key("d1")
    clock.now = 2.0
    assert (await cache.find("d1")) == key("d1", revoked_at=1.0)
    assert store.lookups == ["d1", "d1"]


async def test_an_unknown_key_is_remembered_too_until_the_ttl() -> None:
    store, clock = Store(), Clock()
    cache = KeyCache(store, 2.0, clock=clock)

    assert await cache.find("new") is None
    await store.add(key("new"))  # created meanwhile
    assert await cache.find("new") is None
    clock.now = 2.0
    assert await cache.find("new") == key("new")


async def test_concurrent_misses_share_one_lookup() -> None:
    store = Store()
    store.gate = asyncio.Event()
    await store.add(key("d"))
    cache = KeyCache(store, 2.0, clock=Clock())

    finds = [asyncio.ensure_future(cache.find("d")) for _ in range(10)]
    await asyncio.sleep(0)
    store.gate.set()

    assert await asyncio.gather(*finds) == [key("d")] * 10
    assert store.lookups == ["d"]


async def test_a_storage_failure_reaches_every_waiter_and_is_not_remembered() -> None:
    store = Store()
    store.failing = True
    cache = KeyCache(store, 2.0, clock=Clock())

    results = await asyncio.gather(cache.find("d"), cache.find("d"), return_exceptions=True)
    assert [type(r) for r in results] == [StorageError, StorageError]
    store.failing = False
    await store.add(key("d"))
    assert await cache.find("d") == key("d")


async def test_a_waiter_that_leaves_does_not_cancel_the_lookup() -> None:
    store = Store()
    store.gate = asyncio.Event()
    await store.add(key("d"))
    cache = KeyCache(store, 2.0, clock=Clock())
    leaving = asyncio.ensure_future(cache.find("d"))
    await asyncio.sleep(0)
    staying = asyncio.ensure_future(cache.find("d"))
    await asyncio.sleep(0)

    leaving.cancel()
    store.gate.set()

    assert await staying == key("d")
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_the_cache_keeps_at_most_max_entries() -> None:
    store, clock = Store(), Clock()
    cache = KeyCache(store, 60.0, max_entries=3, clock=clock)
    for digest in ("a", "b", "c", "d"):
        await store.add(key(digest))
        await cache.find(digest)

    await cache.find("a")  # dropped first: asked again
    await cache.find("d")  # still there

    assert store.lookups == ["a", "b", "c", "d", "a"]


async def test_a_flood_of_unknown_keys_does_not_push_out_a_known_one() -> None:
    store, clock = Store(), Clock()
    await store.add(key("real"))
    cache = KeyCache(store, 60.0, clock=clock)
    assert await cache.find("real") == key("real")

    for n in range(2 * MAX_ENTRIES):
        assert await cache.find(f"made-up-{n}") is None
    store.lookups.clear()

    assert await cache.find("real") == key("real")
    assert store.lookups == []  # still a hit: no lookup


async def test_unknown_keys_are_remembered_apart_and_bounded() -> None:
    store, clock = Store(), Clock()
    cache = KeyCache(store, 60.0, max_entries=3, max_unknown=2, clock=clock)
    for digest in ("x", "y", "z"):
        assert await cache.find(digest) is None
    store.lookups.clear()

    await cache.find("z")  # still remembered
    await cache.find("x")  # dropped first: asked again

    assert store.lookups == ["x"]


async def test_an_unknown_key_created_later_moves_to_the_known_keys() -> None:
    store, clock = Store(), Clock()
    cache = KeyCache(store, 2.0, max_unknown=1, clock=clock)
    assert await cache.find("new") is None
    await store.add(key("new"))
    clock.now = 2.0
    assert await cache.find("new") == key("new")
    assert await cache.find("other") is None  # fills the unknown keys' room
    store.lookups.clear()

    assert await cache.find("new") == key("new")
    assert store.lookups == []


async def test_as_many_keys_as_the_bound_are_kept() -> None:
    store = Store()
    cache = KeyCache(store, 10.0, max_entries=2, clock=Clock())
    for digest in ("a", "b"):
        await store.add(key(digest))
        await cache.find(digest)

    await cache.find("a")
    await cache.find("b")

    assert store.lookups == ["a", "b"]


async def test_a_key_loaded_again_is_the_last_to_go() -> None:
    """The bound drops the least recently loaded: a key looked up again after its TTL
    counts as loaded then, not when it was first."""
    store, clock = Store(), Clock()
    cache = KeyCache(store, 10.0, max_entries=2, clock=clock)
    for digest in ("a", "b", "c"):
        await store.add(key(digest))
    await cache.find("a")
    await cache.find("b")
    clock.now = 10.0
    await cache.find("a")  # loaded again: now the newer of the two
    await cache.find("c")  # pushes out "b"

    await cache.find("a")

    assert store.lookups == ["a", "b", "a", "c"]
