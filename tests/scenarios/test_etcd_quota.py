"""An etcd of its own with `--quota-backend-bytes=64MiB` under a skillfs server (issue 28):
one user's token fills its quota and is stopped there, with an error naming it; other users
and agents keep writing; an operator's writes (a global admin: no token quota) are stopped by
the engine's guard before etcd's own quota, so the NOSPACE alarm that would stop every writer
never rises (docs/engine-etcd.md, "Quotas")."""

from __future__ import annotations

from pathlib import Path

import etcd3
import pytest

import skillfs
from skillfs.errors import QuotaExceeded
from skillfs.model import Scope
from skillfs.store.limits import Limits
from support.grpc_servers import ADMIN, ALICE, BOB, running
from support.servers import HOST, EtcdServer
from tests.helpers import skill_md

MiB = 1 << 20
AGENT = "support-bot"


def files(name: str) -> dict[str, bytes]:
    """A skill holding 1 MiB of its own (etcd keeps it as one chunk)."""
    return {"SKILL.md": skill_md(name), "data.bin": name.encode().ljust(MiB, b".")}


def fill(store: skillfs.Store, scope: Scope, tag: str, most: int) -> tuple[int, QuotaExceeded]:
    """Publish 1 MiB skills until a quota refuses one: how many landed, and the refusal."""
    for i in range(most):
        try:
            store.publish(scope, f"{tag}-{i}", files(f"{tag}-{i}"))
        except QuotaExceeded as exc:
            return i, exc
    raise AssertionError(f"{most} MiB written to {scope} and no quota refused any")


@pytest.mark.server
def test_one_token_cannot_raise_the_alarm_and_others_keep_writing(tmp_path: Path) -> None:
    quota = 64 * MiB
    with EtcdServer(tmp_path / "etcd", args=(f"--quota-backend-bytes={quota}",)) as etcd:
        url = f"{etcd.url}?quota_bytes={quota}"
        limits = Limits(token_quota=16 * MiB)
        with running(url, tmp_path / "srv", http=None, limits=limits) as srv:
            address = f"grpc://127.0.0.1:{srv.grpc_port}"
            alice = skillfs.open_store(address, token=ALICE)
            bob = skillfs.open_store(address, token=BOB)
            admin = skillfs.open_store(address, token=ADMIN)
            try:
                landed, refused = fill(alice, Scope.user(AGENT, "alice"), "a", 40)
                assert 12 <= landed <= 16
                assert str(refused).startswith(f"quota of token 'alice' in agents/{AGENT}")
                bob.publish(Scope.user(AGENT, "bob"), "b", files("b"))  # others keep writing
                admin.publish(Scope.shared("other-bot"), "o", files("o"))
                more, guarded = fill(admin, Scope.shared("other-bot"), "o", 80)
                assert more > 20
                assert "past 90% of its quota of 67108864 bytes" in str(guarded)
                assert "before etcd raises its NOSPACE alarm" in str(guarded)
                assert alice.skills(Scope.user(AGENT, "alice"))[:1] == ["a-0"]  # reads go on
            finally:
                for s in (alice, bob, admin):
                    s.close()
        raw = etcd3.client(HOST, etcd.port)
        try:
            assert list(raw.list_alarms()) == []  # never raised
            raw.put("after", "still writable")  # nothing stopped etcd itself
        finally:
            raw.close()
