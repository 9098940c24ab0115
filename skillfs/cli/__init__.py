"""The `skillfs` command (docs/cli.md); the app and its entry point are `skillfs.cli.app`."""
