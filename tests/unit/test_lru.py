"""The one LRU behind the blob cache (bytes) and the server's and client's indexes (count)."""

from __future__ import annotations

from skillfs.util.lru import Lru


def test_count_bounded_drops_the_least_recently_used() -> None:
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # now b is the oldest
    lru.put("c", 3)
    assert (lru.get("a"), lru.get("b"), lru.get("c")) == (1, None, 3)
    lru.pop("a")
    assert lru.get("a") is None


def test_weighted_by_bytes_with_a_largest_item() -> None:
    lru: Lru[str, bytes] = Lru(10, len, max_item=4)
    lru.put("big", b"x" * 5)  # over max_item: not kept
    assert lru.get("big") is None
    for key in "abc":
        lru.put(key, b"xxxx")  # 12 bytes > 10: a goes
    assert lru.get("a") is None and lru.get("b") == b"xxxx" and lru.get("c") == b"xxxx"
    lru.put("b", b"y")  # replacing re-weighs: 1 + 4 bytes, room for one more
    lru.put("d", b"zzzz")
    assert lru.get("b") == b"y" and lru.get("c") == b"xxxx" and lru.get("d") == b"zzzz"
    lru.clear()
    assert lru.get("c") is None
