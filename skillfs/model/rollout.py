"""The staged-rollout rule as stored (docs/governance.md, "Staged rollout"): its parts, how
they combine, who is excluded, its format, and the rule in words; what a rule keeps when it
is widened. Who gets a candidate is evaluated by skillfs.governance.rollout_rule."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skillfs.errors import InvalidArgument
from skillfs.model.names import check_id

#: The rule formats this release reads (docs/governance.md, "The rule"): 1, workers matching
#: any of the parts given (every rule stored before `match` existed); 2, `match` and
#: `excluded_users`. A worker meeting a higher one serves the live version only.
RULE_FORMAT = 2
#: How a rule's parts combine: a worker matching any one of them, or every one given.
MATCHES = ("any", "all")


class Rollout(BaseModel):
    """Who gets a skill's staged candidate (docs/governance.md, "Staged rollout"): the parts
    given — workers declaring one of `environments`, the users named in `users`, the users
    whose stable bucket (`skillfs.governance.rollout_rule.bucket`) is below `fraction` —
    combined by `match`: `any` one of them (what every rule stored before `match` means) or
    `all` of them ("prod and 10 %"); `excluded_users` never get it. The rule with no part
    reaches nobody. `format` is the lowest format that says the rule, so a rule that any
    release could read keeps its stored bytes."""

    model_config = ConfigDict(frozen=True)

    environments: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    fraction: float = 0.0
    match: str = Field(default="any", exclude_if=lambda v: v == "any")
    excluded_users: tuple[str, ...] = Field(default=(), exclude_if=lambda v: not v)
    format: int = Field(default=1, exclude_if=lambda v: v == 1)

    def __init__(
        self,
        environments: Iterable[str] = (),
        users: Iterable[str] = (),
        fraction: float = 0.0,
        match: str = "any",
        excluded_users: Iterable[str] = (),
        **stored: Any,
    ) -> None:
        """`stored`: the rest of a rule read back from the store — its `format`, and what a
        later release adds. A rule of a format this release does not know is kept as read,
        unchecked, and evaluated by nobody (`known`)."""
        fmt = stored.get("format", 1)
        if not isinstance(fmt, int) or fmt > RULE_FORMAT:
            super().__init__(
                environments=environments, users=users, fraction=fraction, match=match,
                excluded_users=excluded_users, format=fmt,
            )  # fmt: skip
            return
        unknown = sorted(set(stored) - {"format"})
        if unknown:
            raise InvalidArgument(
                f"a rollout has no {', '.join(unknown)}: give environments=[...], users=[...], "
                "fraction=, match='any' or 'all', excluded_users=[...]"
            )
        lists = (environments, users, excluded_users)
        if any(isinstance(v, str) for v in lists):
            raise InvalidArgument(
                "a rollout takes lists: environments=[...], users=[...], excluded_users=[...]"
            )
        try:  # sorted and once each: equal rules compare equal
            envs, names, excluded = (tuple(sorted(set(v))) for v in lists)
        except TypeError:
            raise InvalidArgument("a rollout's environments and users are lists of names") from None
        fmt = 1 if match == "any" and not excluded else RULE_FORMAT
        try:
            super().__init__(
                environments=envs, users=names, fraction=fraction, match=match,
                excluded_users=excluded, format=fmt,
            )  # fmt: skip
        except ValidationError as exc:
            problem = exc.errors()[0]
            raise InvalidArgument(
                f"invalid rollout {'.'.join(map(str, problem['loc']))}: {problem['msg']}; give "
                "environments=[names], users=[user ids], fraction= a number from 0 to 1, "
                "match='any' or 'all' and excluded_users=[user ids]"
            ) from None
        self.check()

    @property
    def known(self) -> bool:
        """Whether this release can evaluate the rule (a later one may store a format it
        does not know: its workers then serve the live version only)."""
        return self.format <= RULE_FORMAT and self.match in MATCHES

    def parts(self) -> list[str]:
        """The parts the rule gives, by name: `environments`, `users`, `fraction`."""
        given = {"environments": self.environments, "users": self.users, "fraction": self.fraction}
        return [name for name, value in given.items() if value]

    def describe(self) -> str:
        """The rule in words, for messages, listings and the console: `workers in prod and
        10 % of users, never bob`; `users alice or 10 % of users`; `nobody`."""
        if not self.known:
            return (
                f"a rule of format {self.format} (match {self.match!r}), newer than this "
                "release: its workers serve the live version"
            )
        words = {
            "environments": "workers in " + ", ".join(self.environments),
            "users": "users " + ", ".join(self.users),
            "fraction": f"{self.fraction * 100:g} % of users",
        }
        said = f" {'and' if self.match == 'all' else 'or'} ".join(words[p] for p in self.parts())
        if not said:
            return "nobody"
        return said + (", never " + ", ".join(self.excluded_users) if self.excluded_users else "")

    def dropped_by(self, new: Rollout) -> str:
        """What `new` drops of this rule's reach ("" when it keeps everyone): a user newly
        excluded, a part no longer covered, or — under `all` — a condition added."""
        dropped = [f"user {u} (now excluded)" for u in new.excluded_users
                   if u not in self.excluded_users]  # fmt: skip
        old = self.parts()
        if not old:  # it reached nobody: nothing to keep
            return "; ".join(dropped)
        old_all, new_all = self._all(), new._all()
        if not new_all:  # any of new's parts: each of old's must be covered (any of them, all)
            uncovered = [self._uncovered(new, p) for p in old]
            if not old_all:
                dropped += [u for u in uncovered if u]
            elif all(uncovered):
                dropped.append(f"the workers matching all of {self.describe()}")
        elif not old_all and len(old) > 1:
            dropped.append(
                f"the workers matching only some of {new.describe()} (all of them is narrower "
                f"than any of {self.describe()})"
            )
        else:  # all (one part reads the same as any): each condition of new one of old's, as wide
            for p in new.parts():
                if p not in old:
                    dropped.append(f"the workers outside a new condition, {new.describe()}")
                elif u := self._uncovered(new, p):
                    dropped.append(u)
        return "; ".join(dropped)

    def _all(self) -> bool:
        """Whether the parts combine as `all` (one part reads the same either way)."""
        return self.match == "all" and len(self.parts()) > 1

    def _uncovered(self, new: Rollout, part: str) -> str:
        """What `new`'s part `part` leaves out of this rule's ("" when it covers it)."""
        if part == "fraction":
            if new.fraction < self.fraction:
                return f"users between fraction {new.fraction:g} and {self.fraction:g}"
            return ""
        gone = [v for v in getattr(self, part) if v not in getattr(new, part)]
        kind = "environment" if part == "environments" else "user"
        return f"{kind} {', '.join(gone)}" if gone else ""

    def check(self) -> Rollout:
        """Raise InvalidArgument unless names are ids (docs/design.md §1), 0 <= fraction <= 1,
        `match` is `any` or `all`, and no user is both named and excluded. A rule of a
        format this release does not know is refused: rewriting it would lose what it says."""
        if not isinstance(self.format, int) or self.format > RULE_FORMAT:
            raise InvalidArgument(
                f"this skill's rollout rule has format {self.format}, newer than this release "
                f"(format {RULE_FORMAT}): nothing was written; change it with a release that "
                "knows it"
            )
        for env in self.environments:
            check_id("environment", env)
        for user in (*self.users, *self.excluded_users):
            check_id("user", user)
        if not (math.isfinite(self.fraction) and 0.0 <= self.fraction <= 1.0):
            raise InvalidArgument(
                f"invalid rollout fraction {self.fraction!r}: give a share of users from 0 "
                "(nobody by share) to 1 (everyone), e.g. 0.1 for 10 %"
            )
        if self.match not in MATCHES:
            raise InvalidArgument(
                f"invalid rollout match {self.match!r}: 'any' (a worker matching any part "
                "gets the candidate) or 'all' (it must match every part given)"
            )
        both = sorted(set(self.users) & set(self.excluded_users))
        if both:
            raise InvalidArgument(
                f"user {', '.join(both)} is both named and excluded in the rollout: keep one"
            )
        return self
