"""Redis 7, standalone, Cluster or Sentinel (docs/engine-redis.md)."""
