"""One object per (store object, name) in a process, such as the follower of a domain or the
usage recorder of an agent, shared by every `Skills` that asks for it."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from skillfs.api import Store

T = TypeVar("T")


class PerStore(Generic[T]):
    """The objects `make(store, name)` makes, one per store object and name. They go with
    their store object (weak keys); a forked child has none of its parent's threads, so it
    starts empty and makes its own."""

    def __init__(self, make: Callable[[Store, str], T]) -> None:
        self._make = make
        self._items: weakref.WeakKeyDictionary[Store, dict[str, T]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._items.clear)

    def get(self, store: Store, name: str) -> T:
        """The one object of `name` for this store object, made on first use."""
        with self._lock:
            per_store = self._items.setdefault(store, {})
            item = per_store.get(name)
            if item is None:
                item = per_store[name] = self._make(store, name)
            return item

    def all(self) -> list[T]:
        """Every object made so far (of the store objects still alive)."""
        with self._lock:
            return [item for per_store in self._items.values() for item in per_store.values()]
