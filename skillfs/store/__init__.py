"""The store's core (docs/architecture.md): reads and commits over any engine, its blobs,
limits, retention and GC, and following the change log."""
