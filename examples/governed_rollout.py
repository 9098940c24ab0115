"""An agent-written skill under governance, with a scripted agent (no model, no network).

1. The agent serving user alice runs with `Skills(..., skill_writes="draft")`: it reads the
   shared skill `refund-policy`, finds it out of date and proposes a better version with the
   `propose_skill` tool. That is a draft in alice's scope, in nobody's view.
2. An operator reviews the draft and approves it into the agent's shared scope as a 10 %
   canary (`store.drafts.approve(..., rollout=Rollout(fraction=0.1))`), widens it to 50 %, then
   promotes it to everyone.

Before and after each step, the workers of 50 users take a snapshot, as they would at their
next reasoning step; the log says which users see which version.

    python examples/governed_rollout.py                      # a throw-away SQLite store
    python examples/governed_rollout.py --store redis://localhost:6379/0
"""

from __future__ import annotations

import argparse
import json
import tempfile
from contextlib import ExitStack

import skillfs
from skillfs import Rollout, Scope

AGENT, AUTHOR, OPERATOR = "support-bot", "alice", "operator"
USERS = [f"u{i:02d}" for i in range(1, 51)]
SKILL = "refund-policy"
OLD = "Refunds: within 30 days, to the original payment method."
NEW = "Refunds: within 60 days; store credit after that, up to 90 days."


def skill_md(description: str, body: str, quote: bool = True) -> str:
    value = json.dumps(description) if quote else description
    return f"---\nname: {SKILL}\ndescription: {value}\n---\n# Refund policy\n\n{body}\n"


# ------------------------------------------------------------------ the scripted agent


def agent_turn(skills: skillfs.Skills) -> None:
    """The steps of the agent serving AUTHOR: read the skill it uses, then propose a better
    version with the write tool its snapshot offers, as a model would call it. Its first
    attempt has a YAML mistake; it reads the error and corrects it."""
    snap = skills.snapshot()
    names = [t["function"]["name"] for t in snap.tools()]
    print(f"agent {AGENT}/{AUTHOR}: tools {', '.join(names)}")
    body = snap.call_tool("read_skill", {"skill_id": SKILL})
    print(f"  read_skill({SKILL}) -> {body.strip().splitlines()[-1]}")
    body = "Offer store credit between day 61 and day 90."
    for quote in (False, True):  # unquoted, `description: Refunds: ...` is not valid YAML
        files = {"SKILL.md": skill_md(NEW, body, quote=quote)}
        arguments = json.dumps(
            {"name": SKILL, "files": files, "message": "customers get 60 days since March"}
        )
        result = skills.snapshot().call_tool("propose_skill", arguments)
        print(f"  propose_skill({SKILL}) -> {result}")
        if not result.startswith("Error:"):
            break
    later = skills.snapshot().skill(SKILL)
    print(f"  next step: the agent still sees {label(later.description)} (a draft is in no view)")


# ------------------------------------------------------------------ the operator and the users


def label(description: str) -> str:
    return "new" if description == NEW else "old"


def census(
    workers: dict[str, skillfs.Skills], step: str, before: dict[str, str] | None = None
) -> dict[str, str]:
    """Each user's version at their next snapshot, logged; nobody on the new version
    `before` may be back on the old one (widening keeps everyone in)."""
    seen = {user: label(w.snapshot().skill(SKILL).description) for user, w in workers.items()}
    dropped = [u for u, v in (before or {}).items() if v == "new" and seen[u] != "new"]
    if dropped:
        raise SystemExit(f"users dropped from the new version at {step}: {dropped}")
    on_new = [u for u, v in seen.items() if v == "new"]
    who = "everyone" if len(on_new) == len(seen) else " ".join(on_new) or "nobody"
    print(
        f"[{step}] new version: {len(on_new)} of {len(seen)} users ({who}); "
        f"old version: {len(seen) - len(on_new)}"
    )
    return seen


def run(url: str) -> None:
    store = skillfs.open_store(url)
    shared, mine = Scope.shared(AGENT), Scope.user(AGENT, AUTHOR)
    old = skill_md(OLD, "Refund to the card.").encode()
    store.publish(shared, SKILL, {"SKILL.md": old}, actor=OPERATOR)
    with ExitStack() as stack:
        author = stack.enter_context(skillfs.Skills(store, AGENT, AUTHOR, skill_writes="draft"))
        workers = {u: stack.enter_context(skillfs.Skills(store, AGENT, u)) for u in USERS}
        census(workers, "before")
        agent_turn(author)
        seen = census(workers, "proposed")
        for d in store.drafts.list(mine):
            print(f"operator: draft {d.name} v{d.version} by {d.actor} in {d.scope}: {d.message!r}")
        store.drafts.approve(
            mine,
            SKILL,
            rollout=Rollout(fraction=0.1),
            into=shared,
            options=skillfs.WriteOptions(actor=OPERATOR),
        )
        seen = census(workers, "canary 10 %", seen)
        store.rollouts.widen(
            shared, SKILL, Rollout(fraction=0.5), options=skillfs.WriteOptions(actor=OPERATOR)
        )
        seen = census(workers, "widened to 50 %", seen)
        store.rollouts.promote(shared, SKILL, options=skillfs.WriteOptions(actor=OPERATOR))
        census(workers, "promoted", seen)
    for e in store.governance.audit(shared, skill=SKILL)[::-1]:
        print(f"audit: {SKILL} v{e.version} {e.action} by {e.actor}: {e.message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    if args.store:
        run(args.store)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(f"sqlite:///{tmp}/skills.db")


if __name__ == "__main__":
    main()
