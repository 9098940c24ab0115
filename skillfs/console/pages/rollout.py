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
from skillfs.errors import FailedPrecondition, InvalidPath, InvalidSkill, LiveEditAfterStage
from skillfs.governance.rollout_rule import as_candidate, bucket, gets_candidate, has_live
from skillfs.model import Candidate, Manifest, Rollout, Scope
from skillfs.model.names import check_id

#: The most users the rollout panel names (an agent with more is asked about by user id).
MAX_NAMED = 200


def rollout_of(call: Call) -> Rollout:
    """The rule of a posted form: `environments` and `users` (separated by commas or spaces),
    `percent` (0-100, of users by stable bucket), `match` (`any`, the default, or `all`) and
    `excluded` (users who never get it). InvalidPath saying what to fix."""
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
    excluded = [check_id("user", u) for u in _words(call.field("excluded"))]
    return Rollout(
        environments=envs, users=users, fraction=round(percent / 100.0, 6),
        match=call.field("match") or "any", excluded_users=excluded,
    )  # fmt: skip


def _words(text: str) -> list[str]:
    """Names typed into one box, separated by commas, spaces or new lines; each once."""
    return list(dict.fromkeys(w for w in re.split(r"[\s,]+", text) if w))


def percent(rule: Rollout) -> str:
    """The rule's share of users as the form shows it (`10`, `2.5`, `` for none)."""
    return f"{rule.fraction * 100:g}" if rule.fraction else ""


#: The fields of a rule's form, as `rollout_of` reads them.
RULE_FIELDS = ("environments", "users", "percent", "match", "excluded")


def rule_fields(rule: Rollout) -> dict[str, str]:
    """A rule as its form's fields show it (the editor's canary panel, editing a candidate)."""
    return {
        "environments": ", ".join(rule.environments),
        "users": ", ".join(rule.users),
        "percent": percent(rule),
        "match": rule.match,
        "excluded": ", ".join(rule.excluded_users),
    }


@dataclass(frozen=True)
class Reach:
    """Who a candidate reaches now, for the rollout panel."""

    candidate: Candidate
    rule: str  # the rule in words
    #: The version whose live files everyone else keeps (None: not recorded, staged before
    #: skillfs 0.2, or none: never live).
    live_version: int | None
    #: The environment the known users are asked in: one of an `all` rule's environments
    #: (its users get it only there), else None (they get it whatever their environment).
    env: str | None
    #: Of the users the console knows (those with a scope of their own, `MAX_NAMED` at most),
    #: those the rule gives the candidate, and how many were asked.
    users_in: list[str]
    users_asked: int
    more_users: bool
    #: Users the rule names that have no scope of their own here (not counted as known).
    named_only: list[str]
    #: One user asked about (`?who=`): (user, gets it, their bucket in percent).
    asked: tuple[str, bool, float] | None


def reach(call: Call, scope: Scope, m: Manifest) -> Reach | None:
    """What the rollout panel shows of `m`'s candidate (None without one): its rule, the
    known users it reaches, the named users the console does not know, and the user asked
    about by `?who=`."""
    c = m.candidate
    if c is None:
        return None
    rule = c.rollout
    if scope.kind == "user" and scope.user_id is not None:
        known = [scope.user_id]
    elif scope.agent_id is not None:
        known = call.can.readable_users(scope.agent_id, call.store.users(scope.agent_id))
    else:
        known = []  # a market's users are whoever uses it: ask about one by id
    more = len(known) > MAX_NAMED
    asked_users = known[:MAX_NAMED]
    env = rule.environments[0] if rule.match == "all" and rule.environments else None
    users_in = [u for u in asked_users if gets_candidate(rule, scope, m.skill, u, env)]
    known_set = set(known)
    named_only = [u for u in rule.users if u not in known_set]
    who = call.query.get("who", "").strip()
    asked = None
    if who:
        who = check_id("user", who)
        got = gets_candidate(rule, scope, m.skill, who, env)
        asked = (who, got, bucket(scope, m.skill, who) * 100)
    live = c.live_version if has_live(m) else None
    return Reach(c, rule.describe(), live, env, users_in, len(asked_users), more, named_only, asked)


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
    """The candidate becomes the live version for everyone, in one commit. A live save that
    landed after it was staged is refused by the store; the page then says so and offers
    "Promote anyway" (the form again with `anyway=1`)."""
    call.require(Level.write, scope)
    anyway = call.field("anyway") == "1"
    expected = call.form_int("expected")
    try:
        result = call.store.rollouts.promote(
            scope, skill, options=call.options(expected), strict=not forced(call), anyway=anyway
        )
    except InvalidSkill as exc:
        action = urls.skill_url(scope, skill, "promote")
        return confirm(call, action, f"{skill}'s candidate breaks the spec", {skill: exc.findings})
    except LiveEditAfterStage:
        now = call.store.manifest(scope, skill)
        if now.candidate is None or now.candidate.live_edit is None:  # promoted, aborted since
            raise
        return call.render(
            "promote_anyway.html", 409, scope=scope, m=now, edit=now.candidate.live_edit,
            message=call.field("message"),
        )  # fmt: skip
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
