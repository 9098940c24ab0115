"""How a Redis URL becomes a redis-py client: standalone (`redis://`, `rediss://` with TLS),
Cluster (`redis+cluster://`) or Sentinel (`redis+sentinel://`). The URL is checked when the
engine opens; the client is made on first use. URL forms and options: docs/engine-redis.md."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast
from urllib.parse import unquote, urlencode, urlsplit

import redis
import redis.exceptions as rx
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel

from skillfs.engines.base import host_port
from skillfs.errors import InvalidPath

SCHEMES = (
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)
SOCKET_TIMEOUT = 5.0
#: Query options redis-py takes from the URL (passed on to it).
_CLIENT_QUERY = (
    "socket_timeout", "socket_connect_timeout", "socket_keepalive", "health_check_interval",
    "max_connections", "client_name",
)  # fmt: skip
_TLS_QUERY = (
    "ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_password",
    "ssl_check_hostname",
)  # fmt: skip

Client = redis.Redis | RedisCluster
WHERE = "the Redis URL"  # for `host_port`'s errors


def client_query(scheme: str) -> tuple[str, ...]:
    """The query options a URL of this scheme passes on to redis-py."""
    if scheme not in SCHEMES:
        raise InvalidPath(f"unknown Redis URL scheme {scheme!r}: use one of {', '.join(SCHEMES)}")
    tls = _TLS_QUERY if scheme.startswith("rediss") else ()
    sentinel = ("sentinel_password",) if scheme.endswith("+sentinel") else ()
    return (*_CLIENT_QUERY, *tls, *sentinel)


class _RetryOnce(Retry):
    """One immediate retry of a connection error: a pooled connection the server closed (a
    restart); waiting out an outage is the Store's job. A timeout is not retried, but its
    connection is dropped all the same: redis-py's sentinel connections were otherwise put
    back with the reply still to come, and each later command read the one before's reply."""

    def call_with_retry(
        self,
        do: Callable[[], Any],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> Any:
        def failed(error: Exception, *count: int) -> None:
            fail(error, *count)  # drops the connection
            if isinstance(error, rx.TimeoutError):
                raise error

        return super().call_with_retry(do, failed, is_retryable, with_failure_count)


def client_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """redis-py's keyword arguments: ours, overridden by the caller's `options`."""
    kwargs: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": SOCKET_TIMEOUT,
        "retry": _RetryOnce(NoBackoff(), 1, supported_errors=(rx.ConnectionError, rx.TimeoutError)),
    } | dict(options)
    kwargs["decode_responses"] = False
    return kwargs


def _parsed(url: str, form: str) -> dict[str, Any]:
    """redis-py's reading of a URL, its errors said in ours: redis-py raises a bare
    ValueError for a bad port or option, and reads a database that is not a number as 0."""
    parts = urlsplit(url)
    db = parts.path.strip("/")
    if parts.scheme in ("redis", "rediss") and db and not db.isdigit():
        raise InvalidPath(f"invalid database {db!r} in the Redis URL: give a number, as in {form}")
    try:
        return cast(dict[str, Any], parse_url(url))  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise InvalidPath(f"invalid Redis URL ({exc}): the form is {form}") from None


def client_factory(
    url: str, query: Mapping[str, str], kwargs: dict[str, Any]
) -> Callable[[], Client]:
    """Check the URL now; return what makes the client later. `query` holds the URL's client
    options (see `client_query`), `kwargs` those of `client_kwargs`."""
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme in ("redis", "rediss"):
        plain = parts._replace(query=urlencode(query)).geturl()
        form = f"{scheme}://[[user]:password@]host[:port][/db][?option=value...]"
        host = parts.netloc.rpartition("@")[2]
        if not host:
            raise InvalidPath(f"no host in the Redis URL: the form is {form}")
        host_port(host, 6379, WHERE)
        _parsed(plain, form)
        return lambda: redis.Redis.from_url(plain, **kwargs)
    auth, _, hosts = parts.netloc.rpartition("@")
    nodes = [h for h in hosts.split(",") if h]
    if not nodes:
        raise InvalidPath(f"no host in the {scheme} URL: give host:port[,host:port...]")
    # redis-py parses the credentials and the client options of the query string.
    opts = _parsed(
        f"redis://{auth + '@' if auth else ''}x?{urlencode(query)}",
        f"{scheme}://[[user]:password@]host:port[,host:port...]/...[?option=value...]",
    )
    opts.pop("host", None)
    sentinel_password = opts.pop("sentinel_password", None)
    # The URL's options over ours, as `Redis.from_url` takes them (socket_timeout=0.2 in a
    # Sentinel URL was overridden by the 5 s default).
    opts = kwargs | opts | ({"ssl": True} if scheme.startswith("rediss") else {})
    if scheme in ("redis+cluster", "rediss+cluster"):
        startup = [ClusterNode(*host_port(n, 6379, WHERE)) for n in nodes]  # type: ignore[no-untyped-call]
        return lambda: RedisCluster(startup_nodes=startup, **opts)
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise InvalidPath(
            "a Sentinel URL is redis+sentinel://[:password@]host:port[,host:port...]/service[/db]"
        )
    sentinels = [host_port(n, 26379, WHERE) for n in nodes]
    sentinel_kwargs = {k: v for k, v in opts.items() if k.startswith("socket_") or k == "retry"}
    if sentinel_password:
        sentinel_kwargs["password"] = sentinel_password
    db = int(path[1]) if len(path) == 2 else 0

    def master() -> redis.Redis:
        sentinel = Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
        return cast(redis.Redis, sentinel.master_for(path[0], db=db, **opts))  # type: ignore[no-untyped-call]

    return master
