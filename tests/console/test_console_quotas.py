"""The console's writes are charged to the signed-in token (docs/security.md, "Quotas": the
console names its session's token for every page's commits, `store.quotas.acting_as`), as
a gRPC call's are: a token past its quota is refused on the page, and a global admin, charged
to no token, is held to the scope's quota alone."""

from __future__ import annotations

import uuid

from skillfs.api import open_store
from skillfs.auth import Tokens, tokens_document
from skillfs.console import make_app
from skillfs.store.limits import Limits
from tests.console.test_console import ADMIN, AGENT, GOOD_MD, SHARED, Client, Reply, skill_url

WRITER = "writer-token-0123456789"


def test_a_console_upload_is_charged_to_the_signed_in_token() -> None:
    store = open_store(
        f"memory://{uuid.uuid4().hex[:10]}", limits=Limits(scope_quota=60_000, token_quota=20_000)
    )
    tokens = Tokens(
        text=tokens_document(
            [("ops", ADMIN, ["*:admin"]), ("writer", WRITER, [f"agent:{AGENT}/shared:write"])],
            "receipts",
        )
    )
    app = make_app(store, tokens)
    try:
        store.publish(SHARED, "greeter", {"SKILL.md": GOOD_MD})  # the store's own: no token
        writer = Client(app)
        writer.sign_in(WRITER)

        def upload(c: Client, name: str) -> Reply:
            version = str(store.manifest(SHARED, "greeter").version)
            return c.upload(
                skill_url("greeter", "upload"),
                {"expected": version, "message": "data"},
                {"file": (name, name.encode().ljust(15_000, b"."))},  # each its own blob
            )

        assert upload(writer, "one.bin").status == 200
        assert store.manifest(SHARED, "greeter").actor == "writer"
        refused = upload(writer, "two.bin")  # 30,000 bytes: past the token's 20,000
        assert refused.status == 413, refused.text[-2000:]
        assert "quota of token" in refused.text and "writer" in refused.text
        assert "two.bin" not in store.manifest(SHARED, "greeter").files
        admin = Client(app)
        admin.sign_in(ADMIN)
        assert upload(admin, "two.bin").status == 200  # charged to no token; the scope has room
        assert "two.bin" in store.manifest(SHARED, "greeter").files
        assert upload(admin, "three.bin").status == 200
        full = upload(admin, "four.bin")  # the scope's 60,000, whoever writes
        assert full.status == 413 and "quota of scope" in full.text, full.text[-2000:]
    finally:
        app.close()
        store.close()
