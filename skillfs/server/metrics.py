"""Prometheus metrics of one server process, in its own registry (several servers may share a
process in tests), exposed on the HTTP port at /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.process_collector import ProcessCollector

#: Latency buckets from a cached 4 KiB read (~100 µs) to a 64 MiB upload.
BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "skillfs_grpc_requests",
            "gRPC calls handled, by method and status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self._seconds = Histogram(
            "skillfs_grpc_request_seconds",
            "Time to handle a gRPC call (a stream: until it ends), by method.",
            ["method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.store_up = Gauge(
            "skillfs_store_up",
            "1 while the store answered the last health check, else 0.",
            registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        self._counters: dict[tuple[str, str], Counter] = {}
        self._histograms: dict[str, Histogram] = {}

    def observe(self, method: str, code: str, seconds: float) -> None:
        counter = self._counters.get((method, code))
        if counter is None:  # labels() costs a lock and a lookup: bind each pair once
            counter = self._counters[(method, code)] = self._requests.labels(method, code)
        histogram = self._histograms.get(method)
        if histogram is None:
            histogram = self._histograms[method] = self._seconds.labels(method)
        counter.inc()
        histogram.observe(seconds)

    def exposition(self) -> bytes:
        """The text exposition format Prometheus scrapes."""
        return generate_latest(self.registry)
