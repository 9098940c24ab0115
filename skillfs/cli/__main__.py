"""`python -m skillfs.cli`: the `skillfs` command, as `python -m skillfs` runs it."""

from skillfs.cli.app import main

main()
