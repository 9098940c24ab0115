"""etcd v3 (docs/engine-etcd.md)."""
