"""The console's pages and actions, by area; `skillfs.console.routes` maps URLs to them.

Each handler checks the token's grant for the scope it touches, reads through the store API,
and writes with the version the operator loaded (docs/design.md, contract C6)."""
