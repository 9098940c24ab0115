"""A ReAct-style agent loop on skillfs, with a scripted fake model (no network).

At every reasoning step the worker takes a fresh snapshot, puts its `<available_skills>` block
in the system prompt and offers the skill tools. The fake model picks a skill from the prompt,
loads its SKILL.md, asks for a reference file by a wrong path (and corrects itself from the
listing in the error), reads the file, then re-reads it before answering. Between those two
reads another process publishes an edit to the file, and the very next step sees it.

    python examples/react_loop.py                      # a throw-away SQLite store
    python examples/react_loop.py --store redis://localhost:6379/0

The example skills in examples/skills/ are published into the agent-shared scope first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import skillfs
from skillfs import File, FileEntry, Scope

AGENT, USER = "support-bot", "alice"
SKILLS_DIR = Path(__file__).resolve().parent / "skills"
CHECKLIST = "references/checklist.md"
NEW_RULE = "- Feature flags: new behaviour ships behind a flag that defaults to off."
TASK = "Please review my pull request: it adds retries to the payment client."


# ------------------------------------------------------------------ the store side


def import_skills(store: skillfs.Store, directory: Path) -> None:
    """Publish every skill directory below `directory` into the agent-shared scope."""
    for skill_dir in sorted(p for p in directory.iterdir() if (p / "SKILL.md").is_file()):
        files = {
            p.relative_to(skill_dir).as_posix(): File(p.read_bytes(), mode=p.stat().st_mode & 0o777)
            for p in sorted(skill_dir.rglob("*"))
            if p.is_file()
        }
        store.publish(Scope.shared(AGENT), skill_dir.name, files)


def publish_edit(url: str) -> None:
    """What an operator's console does: read, edit one file, publish on the version read."""
    store = skillfs.open_store(url)
    scope = Scope.shared(AGENT)
    m = store.manifest(scope, "code-reviewer")
    files: dict[str, File | bytes | FileEntry] = dict(m.files)  # the others by reference
    old = store.read_entry(m.files[CHECKLIST]).decode()
    files[CHECKLIST] = File(
        old.replace("## 1. Correctness\n", f"## 1. Correctness\n\n{NEW_RULE}\n", 1).encode()
    )
    commit = store.publish(scope, "code-reviewer", files, expected_version=m.version)
    print(f"[another process] published code-reviewer v{commit.version} at {commit.revision}")


# ------------------------------------------------------------------ the fake model


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON, as function-calling APIs deliver it


@dataclass
class FakeModel:
    """Reads the transcript like a model would and follows a fixed plan.

    It never sees skill content except through the prompt and tool results, so everything
    it does shows what a real model could do with the same text."""

    plan_step: int = 0
    notes: dict[str, str] = field(default_factory=dict)

    def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ToolCall | str:
        assert {t["function"]["name"] for t in tools} >= {"load_skill_through_path"}
        last = messages[-1]["content"]
        self.plan_step += 1
        if self.plan_step == 1:  # pick the skill whose description fits the task
            skill = self._choose_skill(messages[0]["content"], messages[1]["content"])
            self.notes["skill"] = skill
            return self._load(skill, "SKILL.md")
        if self.plan_step == 2:  # follow the link in SKILL.md, misspelling it
            link = re.search(r"\]\((references/[^)]+)\)", last)
            assert link, "SKILL.md names a reference file"
            return self._load(self.notes["skill"], link.group(1).replace("checklist", "check-list"))
        if self.plan_step == 3:  # the error lists the skill's files: take the closest one
            assert last.startswith("Error:"), last
            mean = re.search(r"Did you mean '([^']+)'", last)
            assert mean, last
            return self._load(self.notes["skill"], mean.group(1))
        if self.plan_step == 4:  # re-read before answering, as careful models do
            self.notes["first read"] = last
            return self._load(self.notes["skill"], CHECKLIST)
        first, second = self.notes["first read"], last
        added = [line for line in second.splitlines() if line not in first.splitlines()]
        headings = [line[3:] for line in second.splitlines() if line.startswith("## ")]
        return (
            "Review plan for the retry change, following the code-reviewer checklist: "
            + "; ".join(headings)
            + ". Newly added to the checklist since my first read: "
            + (" ".join(added) if added else "nothing")
        )

    @staticmethod
    def _choose_skill(system: str, task: str) -> str:
        words = set(re.findall(r"[a-z]+", task.lower()))
        best, score = "", -1
        for block in re.findall(r"<skill>(.*?)</skill>", system, re.S):
            skill_id = re.search(r"<skill-id>(.*?)</skill-id>", block, re.S)
            desc = re.search(r"<description>(.*?)</description>", block, re.S)
            assert skill_id and desc
            hits = len(words & set(re.findall(r"[a-z]+", desc.group(1).lower())))
            if hits > score:
                best, score = skill_id.group(1), hits
        return best

    @staticmethod
    def _load(skill_id: str, path: str) -> ToolCall:
        return ToolCall("load_skill_through_path", json.dumps({"skill_id": skill_id, "path": path}))


# ------------------------------------------------------------------ the loop


def run(url: str, max_steps: int = 8) -> str:
    """The loop; returns the model's answer."""
    store = skillfs.open_store(url)
    import_skills(store, SKILLS_DIR)
    model = FakeModel()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": ""},
        {"role": "user", "content": TASK},
    ]
    answer = "(no answer within the step limit)"
    with skillfs.Skills(store, AGENT, USER) as skills:
        for step in range(1, max_steps + 1):
            snap = skills.snapshot()  # once per reasoning step: fresh, one round trip
            messages[0]["content"] = (
                "You are a helpful engineer. Use a skill when one fits the task: load its "
                "SKILL.md with load_skill_through_path first.\n\n" + snap.prompt()
            )
            rev = snap.revisions[f"agents/{AGENT}"]
            print(f"step {step}: snapshot {snap.token[:8]} at revision {rev}")
            reply = model.respond(messages, snap.tools())
            if isinstance(reply, str):
                answer = reply
                break
            result = snap.call_tool(reply.name, reply.arguments)
            print(f"  {reply.name}({reply.arguments}) -> {first_line(result)}")
            messages.append({"role": "assistant", "tool_call": reply.__dict__})
            messages.append({"role": "tool", "content": result})
            if step == 3:  # meanwhile, an operator edits the skill from another process
                subprocess.run(
                    [sys.executable, __file__, "--publish-edit", url],
                    check=True,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                )
    print(f"answer: {answer}")
    print(f"usage: {store.usage.counts(AGENT)}")  # written in one batch when the worker closed
    return answer


def first_line(text: str) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= 100 else line[:97] + "..."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--publish-edit", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish_edit:
        publish_edit(args.publish_edit)
        return
    if args.store:
        run(args.store)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run(f"sqlite:///{tmp}/skills.db")


if __name__ == "__main__":
    main()
