"""A `postgresql://` (or `postgres://`) URL as users write it (docs/engine-postgres.md,
"URLs"): skillfs's own options are taken out and the rest is libpq's, which rejects what it
does not know with its own error. Connections keep TCP alive unless the URL says otherwise,
so a half-open connection is found within about half a minute."""

from __future__ import annotations

import hashlib
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from skillfs.engines.base import LOG_LIMIT, UrlOptions
from skillfs.errors import InvalidArgument

#: The options skillfs reads; every other one goes to libpq.
OWN = ("prefix", "pool_size", "log_limit")
#: Connections of the pool unless `pool_size=` says otherwise.
POOL_SIZE = 10
#: libpq's options skillfs sets where the URL does not: keepalives after 10 s of silence,
#: every 5 s, 3 unanswered ones end the connection; unacknowledged data ends it after 20 s.
DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "20000",
    "application_name": "skillfs",
}
#: PostgreSQL cuts identifiers (a channel's name) to 63 bytes.
MAX_IDENTIFIER = 63


class PostgresUrl:
    """The parts of a URL: skillfs's options, and libpq's connection string (`conninfo`)
    with the defaults above added where the URL has none."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        rest = [(k, v) for k, v in pairs if k not in OWN]
        options = UrlOptions(url, {*OWN, *(k for k, _ in rest)})
        self.redacted = options.url
        self.prefix = options.get("prefix")
        self.pool_size = options.number("pool_size", int, POOL_SIZE)
        self.log_limit = options.number("log_limit", int, LOG_LIMIT)
        conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
        try:
            given = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise InvalidArgument(
                f"store URL {self.redacted}: libpq refused it ({exc}); see the connection "
                "parameters of libpq's documentation"
            ) from None
        self.conninfo = make_conninfo(
            conninfo, **{k: v for k, v in DEFAULTS.items() if k not in given}
        )

    @property
    def channel(self) -> str:
        """The notification channel of this prefix: `skillfs:<prefix>`, or a hash of the
        prefix where that is longer than an identifier may be."""
        name = f"skillfs:{self.prefix}"
        if len(name.encode()) <= MAX_IDENTIFIER:
            return name
        return f"skillfs#{hashlib.sha256(self.prefix.encode()).hexdigest()[:32]}"
