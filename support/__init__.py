"""Support code shared by the tests (tests/) and the benchmarks (bench/); not shipped in the wheel.

- `support.servers`: real Redis, Redis Cluster, Redis Sentinel and etcd servers as child
  processes on loopback;
- `support.grpc_servers`: skillfs servers, in this process or as `skillfs serve` processes,
  trusting a fixed set of test tokens.

Import it from the repository root (pytest's `pythonpath = ["."]`, `python -m bench.x`).
"""
