"""Storage primitives, one package per engine (docs/architecture.md): `base` is the interface
and the rules every engine shares; `skillfs.store.opening` picks one by URL."""
