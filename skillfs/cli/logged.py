"""skillfs's logged warnings in a CLI run (an unreadable stored manifest, a usage write that
failed): one `warning:` line on stderr each, in the style of `error:`, and each said once.
Without a handler, Python printed them bare through its last-resort handler, and again at
every read that met the same thing. `skillfs serve` and `run` log JSON lines instead
(skillfs.server.app.setup_logging replaces this handler)."""

from __future__ import annotations

import logging

from skillfs.cli.common import err, shown


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if text in self._said:
            return
        self._said.add(text)
        err.print(f"[yellow]warning:[/yellow] {shown(text)}")


def say_warnings() -> None:
    """Print the warnings of this run as above, unless logging is set up already (by the
    program that calls the CLI, or a test's log capture)."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(_Warnings())
