"""Staged rollout in the console (docs/governance.md, "Staged rollout"): the rule an operator
types (environments, users, a share of users), who gets a skill's candidate now, and widen,
promote and abort. "Save as canary" in the editor stages through `stage` here."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.call import Call
from skillfs.console.strict import confirm, forced
from skillfs.errors import FailedPrecondition, InvalidPath, InvalidSkill
from skillfs.governance.rollout_rule import as_candidate, bucket, gets_candidate, has_live
from skillfs.model import Candidate, Manifest, Rollout, Scope
from skillfs.model.names import check_id

#: The most users the rollout panel names (an agent with more is asked about by user id).
MAX_NAMED = 200


def rollout_of(call: Call) -> Rollout:
    """The rule of a posted form: `environments` and `users` (separated by commas or spaces)
    and `percent` (0-100, of users by stable bucket). InvalidPath saying what to fix."""
    text = call.field("percent").strip().removesuffix("%").strip()
    try:
        percent = float(text) if text else 0.0
    except ValueError:
        percent = math.nan
    if not math.isfinite(percent) or not 0.0 <= percent <= 100.0:
        raise InvalidPath(
            f"the share of users must be a number from 0 to 100 (percent), not "
            f"{call.field('percent')!r}: e.g. 10 for 10 % of users"
        )
    envs = [check_id("environment", e) for e in _words(call.field("environments"))]
    users = [check_id("user", u) for u in _words(call.field("users"))]
    return Rollout(environments=envs, users=users, fraction=round(percent / 100.0, 6))


def _words(text: str) -> list[str]:
    """Names typed into one box, separated by commas, spaces or new lines; each once."""
    return list(dict.fromkeys(w for w in re.split(r"[\s,]+", text) if w))


def percent(rule: Rollout) -> str:
    """The rule's share of users as the form shows it (`10`, `2.5`, `` for none)."""
    return f"{rule.fraction * 100:g}" if rule.fraction else ""


@dataclass(frozen=True)
class Reach:
    """Who a candidate reaches now, for the rollout panel."""

    candidate: Candidate
    rule: str  # the rule in words
    #: Of the users the console knows (those with a scope of their own, `MAX_NAMED` at most,
    #: and the users the rule names), those the rule gives the candidate, and how many asked.
    users_in: list[str]
    users_asked: int
    more_users: bool
    #: One user asked about (`?who=`): (user, gets it, their bucket in percent).
    asked: tuple[str, bool, float] | None


def reach(call: Call, scope: Scope, m: Manifest) -> Reach | None:
    """What the rollout panel shows of `m`'s candidate (None without one): its rule, the
    known users it reaches without an environment, and the user asked about by `?who=`."""
    c = m.candidate
    if c is None:
        return None
    if scope.kind == "user" and scope.user_id is not None:
        known = [scope.user_id]
    elif scope.agent_id is not None:
        known = call.can.readable_users(scope.agent_id, call.store.users(scope.agent_id))
    else:
        known = []  # a market's users are whoever uses it: ask about one by id
    more = len(known) > MAX_NAMED
    asked_users = list(dict.fromkeys([*c.rollout.users, *known[:MAX_NAMED]]))
    users_in = [u for u in asked_users if gets_candidate(c.rollout, scope, m.skill, u, None)]
    who = call.query.get("who", "").strip()
    asked = None
    if who:
        who = check_id("user", who)
        got = gets_candidate(c.rollout, scope, m.skill, who, None)
        asked = (who, got, bucket(scope, m.skill, who) * 100)
    return Reach(c, c.rollout.describe(), users_in, len(asked_users), more, asked)


def candidate_manifest(m: Manifest) -> Manifest:
    """`m` as the workers the rule reaches see it: the candidate's files, frontmatter and
    findings under the same version (what `skillfs.governance.rollout_rule.effective` gives
    them)."""
    if m.candidate is None:
        raise FailedPrecondition(f"{m.skill} has no staged candidate")
    return as_candidate(m)


def widen(call: Call, scope: Scope, skill: str) -> Response:
    """Give the candidate to more workers: the new rule must keep everyone already in."""
    call.require(Level.write, scope)
    expected = call.form_int("expected")
    rule = rollout_of(call)
    call.store.rollouts.widen(scope, skill, rule, options=call.options(expected))
    return call.done(
        urls.skill_url(scope, skill) + "#rollout",
        f"Widened {skill}'s candidate to {rule.describe()}",
    )


def promote(call: Call, scope: Scope, skill: str) -> Response:
    """The candidate becomes the live version for everyone, in one commit."""
    call.require(Level.write, scope)
    try:
        result = call.store.rollouts.promote(
            scope,
            skill,
            options=call.options(call.form_int("expected")),
            strict=not forced(call),
        )
    except InvalidSkill as exc:
        action = urls.skill_url(scope, skill, "promote")
        return confirm(call, action, f"{skill}'s candidate breaks the spec", {skill: exc.findings})
    return call.done(
        urls.skill_url(scope, skill),
        f"Promoted {skill}'s candidate: every worker sees it from its next step "
        f"(version {result.version})",
    )


def abort(call: Call, scope: Scope, skill: str) -> Response:
    """Drop the candidate: everyone sees the live version again (a skill that was only
    staged is deleted; its history stays)."""
    call.require(Level.write, scope)
    current = call.store.manifest(scope, skill, version=call.form_int("expected"))
    staged_only = not has_live(current)
    call.store.rollouts.abort(scope, skill, options=call.options(current.version))
    if staged_only:
        return call.done(
            urls.scope_url(scope), f"Aborted {skill}: it was never live, so it is gone"
        )
    return call.done(
        urls.skill_url(scope, skill), f"Aborted {skill}'s candidate: everyone sees the live version"
    )
