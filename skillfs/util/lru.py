"""A bounded, thread-safe map that drops the least recently used entries first.

Each entry weighs `weigh(value)` against the capacity: 1 by default (a count-bounded map:
the server's manifest index, the grpc:// engine's proof caches), bytes for the Store's
blob cache. An entry heavier than `max_item` is not kept, so one large file cannot flush
everything else."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def _one(_: object) -> int:
    return 1


class Lru(Generic[K, V]):
    def __init__(
        self,
        capacity: int,
        weigh: Callable[[V], int] = _one,
        max_item: int | None = None,
    ) -> None:
        self.capacity = capacity
        self._weigh = weigh
        self._max_item = capacity if max_item is None else max_item
        self._items: OrderedDict[K, V] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        weight = self._weigh(value)
        if weight > self._max_item:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._weight -= self._weigh(old)
            self._items[key] = value
            self._weight += weight
            while self._weight > self.capacity:
                _, dropped = self._items.popitem(last=False)
                self._weight -= self._weigh(dropped)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._weight = 0

    def pop(self, key: K) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._weight -= self._weigh(old)
