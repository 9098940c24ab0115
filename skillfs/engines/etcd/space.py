"""The last-resort guard of an etcd store's space (docs/engine-etcd.md, "Quotas"): etcd
stops taking writes for good (the NOSPACE alarm, until an operator compacts, defragments and
disarms it) once its backend passes `--quota-backend-bytes`, which is every writer's outage,
not one writer's. So before a commit or a blob upload the engine reads the backend's size
(Maintenance/Status, at most once a second) and refuses the write while it is past a share
of the quota, with an error naming the quota. etcd 3.4 does not report its quota: the URL
says it (`quota_bytes=`, etcd's default 2 GiB) and the share (`quota_share=`, 0.9)."""

from __future__ import annotations

import threading
import time

from skillfs.engines.base import MiB, UrlOptions
from skillfs.engines.etcd.client import EtcdClient
from skillfs.errors import InvalidPath, QuotaExceeded

#: etcd's default --quota-backend-bytes.
QUOTA_BYTES = 2048 * MiB
#: The share of the quota past which writes are refused.
QUOTA_SHARE = 0.9
#: Seconds a size read serves before it is read again.
FRESH = 1.0
#: The URL's options for it.
SPACE_QUERY = ("quota_bytes", "quota_share")


class SpaceGuard:
    """Refuses writes while the backend is past `share` of `quota` bytes."""

    def __init__(self, etcd: EtcdClient, options: UrlOptions) -> None:
        self._etcd = etcd
        self.quota = options.number("quota_bytes", int, QUOTA_BYTES)
        self.share = options.number("quota_share", float, QUOTA_SHARE)
        if self.share > 1:
            raise InvalidPath(
                f"quota_share={self.share} in {options.url}: give a share of the quota, "
                "more than 0 and at most 1"
            )
        self._lock = threading.Lock()
        self._read: tuple[float, int] = (-FRESH, 0)  # (time.monotonic() read, bytes)
        #: Bytes this engine sent since the size was read: between two reads the size is
        #: taken to have grown by them, so a fast writer cannot overshoot by a second's worth.
        self._sent = 0

    def note(self, sent: int) -> None:
        """Count `sent` bytes written since the last read."""
        with self._lock:
            self._sent += sent

    def check(self) -> None:
        """QuotaExceeded when the backend is past the share (read at most once a second,
        plus what was written since)."""
        size = self._size()
        limit = int(self.quota * self.share)
        if size > limit:
            raise QuotaExceeded(
                f"etcd store {self._etcd.url} holds {size} bytes, past {self.share:.0%} of its "
                f"quota of {self.quota} bytes (--quota-backend-bytes; quota_bytes= in the URL): "
                "nothing was written. skillfs refuses writes here before etcd raises its NOSPACE "
                "alarm, which would stop every writer. Free space (skillfs gc, then compact and "
                "defragment etcd) or raise the cluster's --quota-backend-bytes and quota_bytes="
            )

    def _size(self) -> int:
        with self._lock:
            at, size = self._read
            if time.monotonic() - at < FRESH:
                return size + self._sent
        size = self._etcd.db_size()
        with self._lock:
            self._read, self._sent = (time.monotonic(), size), 0
        return size
