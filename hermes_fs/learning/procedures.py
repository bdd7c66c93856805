"""A procedure that worked becomes a skill: a new one, or a patch of the skill the conversation used.

The model judges that a procedure worked and names its steps; code keeps only the steps that are
commands the assistant really ran (verbatim, from its tool calls: never a tool's output or a pasted
text, so an injected command cannot become a skill), drops any that hold a credential, and writes
the skill in the Agent Skills form the validator checks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .guards import ONE_OFF, Said, Verdict, norm, stems
from .validate import tokens

STEP_SHARE = 0.6  # of a step's words a command must hold to be that step
MAX_STEPS = 8
NAME_WORDS = 4


@dataclass
class SkillChange:
    """The skill_manage call a procedure becomes."""

    action: str  # create | patch
    name: str
    content: str = ""
    old_text: str = ""
    new_text: str = ""


def grounded_steps(steps: list[str], conv: Said) -> list[str]:
    """The commands the assistant ran that the model's steps name, verbatim, in the order they ran."""
    ran = conv.commands()
    chosen: set[int] = set()
    for step in steps:
        want = tokens(step)
        for n, cmd in enumerate(ran):
            c = norm(cmd)
            if norm(step) and (norm(step) in c or (want and len(want & tokens(cmd)) >= STEP_SHARE * len(want))):
                chosen.add(n)
    # a command run again later replaces its earlier tries: keep the last of each
    return kept_steps(last_tries([ran[n] for n in sorted(chosen)]), conv)


def endorsed_steps(v: Verdict, conv: Said) -> list[str]:
    """The commands a person's lasting words endorse, when they are a procedure that worked: the
    person said them in their turn right after the assistant ran commands, the lesson or the
    sentence shares a word with them, and there are at least two (steps, or tries of one: a
    failure, then what worked). The last try of each, in the order they ran; else none (a
    preference said after one command is not a procedure). Structure only: what the words mean
    is the model's (they were judged lasting)."""
    if v.turn <= 0 or conv.turns[v.turn].role != "person":
        return []
    before = conv.turns[:v.turn]
    since = next((i for i in range(len(before) - 1, -1, -1) if before[i].role == "person"), -1)
    if not any(t.commands for t in before[since + 1:]):
        return []  # the person was not answering what had just run
    words = stems(f"{v.lesson} {v.sentence}")
    about = [c for t in before for c in t.commands if words & stems(c)]
    return kept_steps(last_tries(about), conv) if len(about) >= 2 else []


def last_tries(commands: list[str]) -> list[str]:
    """Each step's last try, in the order the steps ran: `fly deploy --x` then `fly deploy --y` is one step."""
    last: dict[str, int] = {}
    for n, cmd in enumerate(commands):
        last[_head(cmd)] = n
    return [commands[n] for n in sorted(last.values())]


def kept_steps(commands: list[str], conv: Said) -> list[str]:
    """At most MAX_STEPS steps, none holding a credential (or a value the conversation told as one:
    `printf '%s' 'VALUE' > key` after "the repo key is VALUE") or a one-off detail (`git checkout
    a1b2c3d` checked out one commit of one day: not a step to repeat)."""
    return [general(c) for c in commands if not conv.holds_secret(c) and not ONE_OFF.search(c)][:MAX_STEPS]


# a release number of today's run (27.1.11, 0.14.2, 29.0.8.1): the next run has another
_VERSION = re.compile(r"(?<![\w.])(\d+\.\d+\.\d+(?:\.\d+)?)(?![\w.]*\d)")
_ADDRESS = re.compile(r"(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})")


def general(cmd: str) -> str:
    """A step as a skill says it: the release numbers of the run it was learned from as <version>
    (`helm push payments-0.14.2.tgz` is `helm push payments-<version>.tgz` next time). An IPv4
    address is no release number."""
    def one(m: re.Match) -> str:
        return m.group(0) if _ADDRESS.fullmatch(m.group(1)) else "<version>"
    return _VERSION.sub(one, cmd)


def _head(cmd: str) -> str:
    """A command's program and subcommand: `fly deploy --x` and `fly deploy --y` are two tries of
    one step. A leading `cd DIR &&` is where it ran, not what it did (`cd ~/src && helm push` and
    `cd ~/src && git commit` are two steps)."""
    parts = [p for p in re.split(r"\s*(?:&&|;)\s*", cmd.strip()) if p]
    while len(parts) > 1 and parts[0].split()[:1] == ["cd"]:
        parts = parts[1:]
    return " ".join((parts[0] if parts else cmd).split()[:2])


def skill_change(v: Verdict, commands: list[str], conv: Said, existing: dict[str, str], session: str) -> SkillChange:
    """Patch the skill the conversation opened when the lesson is about it; else a new skill."""
    used = [s for s in conv.skills_used() if s in existing]
    about = max(used, key=lambda s: len(stems(v.lesson) & stems(s.replace("-", " ") + " " + existing[s])),
                default=None)
    if about is not None:
        return SkillChange("patch", about, old_text="", new_text=learned_section(v, commands, session))
    ask = first_request(conv)
    # a procedure's lesson says what it does; a person's endorsement ("that's the way") does not:
    # then the skill is titled and named for the request it answered
    if v.kind == "procedure" or not ask:
        title = _sentence(v.lesson)
        description = f"{title} Use when asked: {ask}" if ask else f"{title} Use to do it again"
    else:
        title = _sentence(ask)
        description = f"{title} The way the user endorsed: {_sentence(v.lesson)}"
    name = skill_name(title)
    description = " ".join(description.split())[:300].rstrip(" .") + "."
    steps = "\n".join(f"{n}. `{c}`" if "`" not in c else f"{n}. {c}" for n, c in enumerate(commands, 1))
    why = f"The user: “{v.sentence}”" if v.sentence else "It worked in the conversation this was learned from."
    content = (f"---\nname: {name}\ndescription: {json.dumps(description, ensure_ascii=False)}\n---\n# {title}\n\n"
               f"## Steps\n{steps}\n\n## Why\n{why} (session {session})\n")
    return SkillChange("create", name, content=content)


def learned_section(v: Verdict, commands: list[str], session: str) -> str:
    """What a patch adds to a skill the procedure belongs to: the lesson and its commands."""
    lines = [f"\n## Learned (session {session})\n", f"- {_sentence(v.lesson)}"]
    lines += [f"  - `{c}`" for c in commands]
    return "\n".join(lines) + "\n"


def skill_name(lesson: str) -> str:
    words = [w for w in re.findall(r"[a-z0-9]+", lesson.lower()) if w in tokens(w)][:NAME_WORDS]
    return "-".join(words)[:60].strip("-") or "learned-procedure"


def first_request(conv: Said) -> str:
    """The person's first sentence: what they asked for, in their words (the skill is for that).
    Only its first clause when that says enough: in "release the payments chart, the HPA change is
    merged to main" the rest is today's news, not what the skill is for."""
    for _i, s in conv.person():
        if len(s.split()) >= 3 and not conv.holds_secret(s):
            head = re.split(r"[,;:]\s", s, maxsplit=1)[0]
            return (head if len(head.split()) >= 3 else s).rstrip(" .?!")[:160]
    return ""


def _sentence(text: str) -> str:
    t = " ".join(text.split()).rstrip(" .")
    return (t[:1].upper() + t[1:] + ".") if t else ""
