"""One operator's console for a browser test module (test_console_governance_browser.py,
test_console_operator_browser.py): a SQLite store with three shared skills of `support-bot`,
a console whose tokens config holds `oncall-ana` with an admin grant on everything, and a
page signed in as that operator. A module imports the fixtures (`operator_store`,
`operator_console`, `operator_page`; a test asks for `store`, `console` and `page`) and gets
a store and a console of its own (module scope)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page

import skillfs
from skillfs.auth import Tokens, tokens_document
from skillfs.console import ConsoleServer, make_app, serve
from skillfs.model import Scope
from tests.browser_helpers import signed_in
from tests.console.test_console import example_files

TOKEN = "oncall-ana-token-0123456789"
OPERATOR = "oncall-ana"
AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")


@pytest.fixture(name="store", scope="module")
def operator_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[skillfs.Store]:
    s = skillfs.open_store(f"sqlite:///{tmp_path_factory.mktemp('ops') / 'skills.db'}")
    for name in ("code-reviewer", "release-notes", "sql-query-helper"):
        s.publish(SHARED, name, example_files(name), actor="seed")
    yield s
    s.close()


@pytest.fixture(name="console", scope="module")
def operator_console(store: skillfs.Store) -> Iterator[ConsoleServer]:
    tokens = Tokens(text=tokens_document([(OPERATOR, TOKEN, ["*:admin"])], "receipts"))
    server = serve(make_app(store, tokens))
    yield server
    server.stop()


@pytest.fixture(name="page")
def operator_page(browser: Browser, console: ConsoleServer) -> Iterator[Page]:
    with signed_in(browser, console.url, TOKEN) as pg:
        yield pg
