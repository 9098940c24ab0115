"""`skillfs prompt`, `watch` and `gc`."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import skillfs
from skillfs.runtime import Skills
from tests.cli_helpers import (
    REPO,
    as_json,
    command_line,
    environment,
    error_line,
    ok,
    publish,
    run,
    skill_md,
)
from tests.stores import url_for


@pytest.fixture
def url(tmp_path: Path) -> str:
    """An empty store (the file exists: reading commands refuse one that does not)."""
    url = f"sqlite:///{tmp_path / 'skills.db'}"
    skillfs.open_store(url).close()
    return url


# -------------------------------------------------------------------------------- prompt


def test_prompt_is_what_a_worker_sees(url: str) -> None:
    publish(url, "market:team", "lint", {"SKILL.md": skill_md("lint")})
    publish(url, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer")})
    publish(url, "shared:bot", "broken", {"SKILL.md": b"no frontmatter"})
    publish(url, "user:bot/alice", "reviewer", {"SKILL.md": skill_md("reviewer", "mine\n")})
    result = ok(url, "prompt", "--agent", "bot", "--user", "alice", "--market", "team")
    with Skills(url, "bot", "alice", [skillfs.Market("team")]) as skills:
        expected = skills.snapshot().prompt()
    assert result.stdout == expected + "\n"
    assert "<name>lint</name>" in expected and "<name>reviewer</name>" in expected
    assert "left out broken (shared:bot)" in result.stderr
    assert "SKILL.md must start with a '---' line" in result.stderr

    data = as_json(url, "prompt", "-a", "bot", "-u", "alice", "--market", "team")
    assert data["prompt"] == expected
    assert [(s["id"], s["source"], s["version"]) for s in data["skills"]] == [
        ("lint", "market:team", 1),
        ("reviewer", "user:bot/alice", 1),
    ]
    assert data["skills"][1]["shadows"] == ["shared:bot"]
    assert data["left_out"][0]["skill"] == "broken" and data["left_out"][0]["errors"]
    assert set(data["revisions"]) == {"agents/bot", "markets/team"}

    bob = as_json(url, "prompt", "-a", "bot", "-u", "bob")
    assert [(s["id"], s["source"]) for s in bob["skills"]] == [("reviewer", "shared:bot")]


def test_prompt_without_a_user_is_the_shared_view(url: str) -> None:
    publish(url, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer")})
    publish(url, "user:bot/alice", "notes", {"SKILL.md": skill_md("notes")})
    publish(url, "user:bot/nobody", "mine", {"SKILL.md": skill_md("mine")})  # a real user
    data = as_json(url, "prompt", "--agent", "bot")
    assert [(s["id"], s["source"]) for s in data["skills"]] == [("reviewer", "shared:bot")]
    assert "<name>reviewer</name>" in ok(url, "prompt", "--agent", "bot").stdout


def test_prompt_with_a_local_layer(url: str, tmp_path: Path) -> None:
    local = tmp_path / "local" / "helper"
    local.mkdir(parents=True)
    (local / "SKILL.md").write_bytes(skill_md("helper"))
    data = as_json(url, "prompt", "-a", "bot", "-u", "alice", "--local", str(tmp_path / "local"))
    assert [s["id"] for s in data["skills"]] == ["helper"]
    assert data["skills"][0]["source"].startswith("local:")


def test_prompt_warns_about_an_agent_or_market_with_nothing_in_the_store(url: str) -> None:
    publish(url, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer")})
    publish(url, "market:team", "lint", {"SKILL.md": skill_md("lint")})
    result = run(url, "prompt", "--agent", "nobody", "--user", "x", "--market", "nomarket")
    assert result.exit_code == 0  # an empty view is legitimate
    assert result.stdout == "\n"  # no block for an empty view (docs/runtime.md)
    assert f"warning: agent 'nobody' has nothing in {url}: check the id (agents there: bot)" in (
        result.stderr
    )
    assert "warning: market 'nomarket' has nothing in" in result.stderr
    assert "(markets there: team)" in result.stderr
    data = as_json(url, "prompt", "-a", "nobody", "-u", "x")  # stdout stays clean JSON
    assert data["skills"] == []
    quiet = run(url, "prompt", "--agent", "bot", "--user", "x", "--market", "team")
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr


def test_prompt_bad_input(url: str) -> None:
    assert "invalid user id" in error_line(run(url, "prompt", "-a", "bot", "-u", "a/b"), code=2)
    text = error_line(run(url, "prompt", "-a", "bot", "-u", "x", "--market", "_no"), code=2)
    assert "invalid market id" in text
    line = error_line(run("redis://127.0.0.1:1/0", "prompt", "-a", "bot", "-u", "x"))
    assert "is unavailable" in line


def test_prompt_invoke_is_what_a_users_invocation_gives_the_model(url: str) -> None:
    deploy = (
        b"---\nname: deploy\ndescription: Deploys.\ndisable-model-invocation: true\n---\n"
        b"Deploy $0 with $1. Line: $ARGUMENTS\n"
    )
    publish(url, "shared:bot", "deploy", {"SKILL.md": deploy})
    publish(url, "shared:bot", "reviewer", {"SKILL.md": skill_md("reviewer")})
    assert "deploy" not in ok(url, "prompt", "-a", "bot").stdout  # the model never sees it
    one = ok(url, "prompt", "-a", "bot", "--invoke", "deploy", '"eu west" --now')
    assert one.stdout == 'Deploy eu west with --now. Line: "eu west" --now\n'
    several = ok(url, "prompt", "-a", "bot", "--invoke", "deploy", "eu west", "now")
    assert several.stdout == "Deploy eu west with now. Line: 'eu west' now\n"
    data = as_json(url, "prompt", "-a", "bot", "--invoke", "reviewer", "x")
    assert data["skill"] == "reviewer" and data["text"].endswith("\n\nARGUMENTS: x\n")
    assert "unknown skill id 'nope'" in error_line(
        run(url, "prompt", "-a", "bot", "--invoke", "nope")
    )
    assert "ARGS go with --invoke" in error_line(run(url, "prompt", "-a", "bot", "x"), code=2)


# --------------------------------------------------------------------------------- watch


def _publish_later(url: str, delay: float, *skills: str) -> threading.Thread:
    def write() -> None:
        time.sleep(delay)
        for skill in skills:
            publish(url, "shared:bot", skill, {"SKILL.md": skill_md(skill)})

    thread = threading.Thread(target=write)
    thread.start()
    return thread


@pytest.mark.parametrize("engine", ["sqlite", "redis"])
def test_watch_prints_changes_as_they_commit(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = url_for(request, engine, tmp_path)
    publish(url, "shared:bot", "before", {"SKILL.md": skill_md("before")})
    with skillfs.open_store(url) as store:  # from here: a loaded machine may start the
        start = store.revision("bot")  # watch after the writes, which it must print still
    writer = _publish_later(url, 0.5, "one", "two")
    since = ("--since", str(start))
    result = ok(url, "watch", "--agent", "bot", *since, "--timeout", "3", "--json")
    writer.join()
    changes = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(c["op"], c["scope"], c["skill"], c["version"]) for c in changes] == [
        ("put", "shared:bot", "one", 1),
        ("put", "shared:bot", "two", 1),
    ]
    assert "watching agent bot from revision" in result.stderr


def test_watch_since_and_human_lines(url: str) -> None:
    publish(url, "shared:bot", "a", {"SKILL.md": skill_md("a")})
    with skillfs.open_store(url) as store:
        start = store.revision("bot")
        publish(url, "shared:bot", "b", {"SKILL.md": skill_md("b")})
        store.delete(skillfs.Scope.shared("bot"), "a")
    result = ok(url, "watch", "-a", "bot", "--since", str(start), "--timeout", "1")
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[1:] == ["put", "shared:bot/b", "version", "1"]
    assert lines[1].split()[1:] == ["remove", "shared:bot/a", "version", "2"]


def test_watch_a_market(url: str) -> None:
    def write() -> None:
        time.sleep(0.5)
        publish(url, "market:team", "lint", {"SKILL.md": skill_md("lint")})

    thread = threading.Thread(target=write)
    thread.start()
    result = ok(url, "watch", "--market", "team", "--timeout", "2.5", "--json")
    thread.join()
    assert [json.loads(x)["scope"] for x in result.stdout.splitlines()] == ["market:team"]


def test_watch_warns_about_a_market_with_nothing_in_the_store(url: str) -> None:
    result = ok(url, "watch", "--market", "nomarket", "--timeout", "0")
    assert "warning: market 'nomarket' has nothing in" in result.stderr
    assert "watching market nomarket from revision none" in result.stderr


def test_watch_bad_input(url: str) -> None:
    assert "give --agent A or --market M" in error_line(run(url, "watch", "--timeout", "0"), 2)
    both = run(url, "watch", "-a", "x", "--market", "y", "--timeout", "0")
    assert "give --agent A or --market M" in error_line(both, 2)
    since = run(url, "watch", "-a", "bot", "--since", "yesterday", "--timeout", "0")
    assert "invalid revision 'yesterday'" in error_line(since, 2)
    assert "invalid agent id" in error_line(run(url, "watch", "-a", "a/b", "--timeout", "0"), 2)
    assert "invalid market id" in error_line(run(url, "watch", "--market", "a/b"), 2)


def test_watch_stops_on_ctrl_c(url: str) -> None:
    """The real entry point: runs until SIGINT, then exits 0 without a traceback."""
    publish(url, "shared:bot", "a", {"SKILL.md": skill_md("a")})
    # Ctrl-C in a terminal reaches a process whose SIGINT has its default action; a suite
    # started in the background (make test's serial lane, `nohup make test &`) hands its
    # children SIGINT ignored, which Python then leaves ignored. So the child sets it first.
    argv = command_line("watch", "-a", "bot", "--json", "--store", url)
    assert argv[1] == "-c"
    argv[2] = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); " + argv[2]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=environment(),
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        assert "watching agent bot" in proc.stderr.readline()
        publish(url, "shared:bot", "b", {"SKILL.md": skill_md("b")})
        change = json.loads(proc.stdout.readline())
        assert (change["skill"], change["op"]) == ("b", "put")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------------------------ gc


def test_gc(url: str) -> None:
    publish(url, "shared:bot", "a", {"SKILL.md": skill_md("a")})
    with skillfs.open_store(url) as store:  # a blob an interrupted publish left behind
        store.engine.put_blob("0" * 64, [b"orphan"], time.time() - 10)
    assert as_json(url, "gc") == {
        "blobs_seen": 2,
        "blobs_referenced": 1,
        "blobs_deleted": 0,  # within the default grace of an hour
        "history_dropped": 0,
    }
    report = as_json(url, "gc", "--grace", "0")
    assert (report["blobs_seen"], report["blobs_deleted"]) == (2, 1)
    human = ok(url, "gc", "--grace", "0").stdout
    assert "blobs seen" in human and "blobs deleted" in human
    assert ok(url, "cat", "a/SKILL.md", "-s", "shared:bot").stdout_bytes == skill_md("a")
    assert "Invalid value for '--grace'" in error_line(run(url, "gc", "--grace", "-1"), 2)
