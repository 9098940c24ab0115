"""What a process keeps per store object besides the store's own state: the runtime's
follower of a domain, its usage recorder of an agent. They belong to the store object (no
registry beside it), are made once on first use and closed with the store, and a forked child
makes its own: the parent's threads are not in it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")


@runtime_checkable
class Closing(Protocol):
    def close(self) -> None: ...


class Locals:
    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._items: dict[tuple[Callable[..., Any], str], Any] = {}

    def get(self, make: Callable[[str], T], kind: Callable[..., Any], name: str) -> T:
        """The one object of `kind` named `name`, `make(name)` on first use."""
        if self._pid != os.getpid():  # a forked child: nothing of the parent's is running
            self._pid, self._lock, self._items = os.getpid(), threading.Lock(), {}
        with self._lock:
            key = (kind, name)
            if key not in self._items:
                self._items[key] = make(name)
            item: T = self._items[key]
            return item

    def close(self) -> None:
        """Close what has a `close` (a usage recorder writes its pending counts)."""
        with self._lock:
            items, self._items = list(self._items.values()), {}
        for item in items:
            if isinstance(item, Closing):
                item.close()
