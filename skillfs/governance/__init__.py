"""Governed change (docs/governance.md): the services behind the store's namespaces."""
