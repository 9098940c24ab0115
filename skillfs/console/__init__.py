"""The skillfs admin console: an ASGI app (Starlette) that `skillfs serve` mounts on its HTTP
port.

    app = skillfs.console.make_app(store, tokens)      # tokens: skillfs.auth.Tokens
    server = skillfs.console.serve(app, "127.0.0.1", 8080)   # or mount `app` in any ASGI server

docs/console.md describes the pages, sign-in and how strict saving is.
"""

from skillfs.console.app import Console, make_app
from skillfs.console.serve import ConsoleServer, serve

__all__ = ["Console", "ConsoleServer", "make_app", "serve"]
