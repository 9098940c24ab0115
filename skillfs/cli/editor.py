"""The operator's $EDITOR session of `skillfs edit`: the temporary copy it works on.

Text typed in an editor is never lost: the copy stays on disk while it holds what was not
saved, and every message then names it (docs/cli.md).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path, PurePosixPath

from skillfs.cli import common
from skillfs.cli.common import fail


class EditorCopy:
    """The temporary copy of the file the editor works on, in its own `skillfs-edit-*`
    directory. The directory is removed when the edit is saved or nothing was typed; it stays
    only while it holds text that was not saved, and every message then names it."""

    def __init__(self, path: str, original: bytes) -> None:
        self.original = original
        self.dir = Path(tempfile.mkdtemp(prefix="skillfs-edit-"))
        self.path = self.dir / PurePosixPath(path).name
        self.path.write_bytes(original)

    def unsaved(self) -> bool:
        """Whether the copy holds text that differs from what was read."""
        try:
            return self.path.read_bytes() != self.original
        except OSError:
            return False

    @property
    def kept(self) -> str:
        return f"your edit is kept in {self.path}"

    def not_saved(self) -> str:
        """The words "nothing saved", naming the copy when it holds unsaved text."""
        return f"nothing saved; {self.kept}" if self.unsaved() else "nothing saved"

    def edit(self) -> bytes:
        editor = os.environ.get("EDITOR")
        if not editor:
            if not common.interactive():  # vi with no terminal waits for keys nobody types
                raise fail(
                    "no editor: $EDITOR is not set and there is no terminal for vi; set it, "
                    f"e.g. EDITOR=nano or EDITOR='code --wait'; {self.not_saved()}"
                )
            editor = "vi"
        try:
            code = subprocess.run([*shlex.split(editor), str(self.path)], check=False).returncode
        except FileNotFoundError:
            raise fail(f"editor {editor!r} not found: set $EDITOR; {self.not_saved()}") from None
        if code != 0:
            raise fail(f"editor {editor!r} exited with status {code}: {self.not_saved()}")
        return self.path.read_bytes()

    def write(self, data: bytes) -> None:
        self.path.write_bytes(data)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
