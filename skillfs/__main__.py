"""`python -m skillfs ...`: the `skillfs` command, for where its script is not on PATH."""

from skillfs.cli.app import main

main()
