"""Lessons first: a small model proposes lessons and judges their meaning; code keeps the invariants.

Structured refine for small models. One short call asks for candidate lessons, each with the
person's words that show it, its kind (a lasting preference, a lasting fact, a procedure that
worked, a one-off, someone else's words) and, for a procedure, its steps. It is sampled several
times at a temperature above zero. Meaning is the model's judgement: a lesson is kept when at
least `agree` samples propose it as lasting (unless every sentence it stands on was sorted as for
just now and the lesson itself, sorted alone, is too); else when the model, shown the person's
sentence alone, sorts it as lasting (a forced choice: from now on, just now, or thanks), which also
keeps sentences no sample proposed, in the person's words (consecutive ones as one entry). No
yes/no question decides what lasts (a small model says yes to nearly anything). What must hold
however the person phrased it is
code's (`guards.py`): the quote is the person's own words, their later words win, nothing bound to
a time, no credential, no one-off detail, the lesson's words the conversation's own. Then:
- a memory entry that repeats one memory holds is not added again;
- one on the topic of an entry a person wrote is never written beside it: it replaces that entry
  when the person's words say the old one is out of date (one short verification call; the change
  then waits for review, as every change to a person's entry does), else it is held back and
  named as a contradiction in the review;
- a procedure becomes a skill (`procedures.py`): a patch of the skill the conversation used, or a
  new skill whose steps are the commands the assistant really ran; so do the commands the person's
  lasting words endorse, said right after they ran.
The model only proposes: what may be written, and where, is decided here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from ..agent.model import Model, Usage
from ..agent.tools import ToolBox
from ..errors import HermesError, InputError
from ..mind import embeddings, memory
from ..store.overlay import OverlayFiles
from . import guards
from .guards import Said, Turn, Verdict, norm, sentences, stems
from .pipeline import LearningError
from .procedures import endorsed_steps, grounded_steps, learned_section, skill_change
from .protection import PersonEntry
from .structured import Applied, DocumentError, _Strict, parse_document, response_format
from .validate import skills_at, tokens

SAMPLES = 3  # answers drawn for one conversation
AGREE = 2  # of them that must propose a lesson as lasting for it to be kept
TEMPERATURE = 0.7  # different samples, so agreement means something
SAME_LESSON = 0.5  # share of words two lessons have in common to be one lesson
DUPLICATE_ENTRY = 0.6  # share of words a lesson has in common with a memory entry to be a repeat
SORTED_SENTENCES = 40  # the person's latest sentences each sorted on its own (see LessonTask._sort)
SAME_TOPIC = 2  # topic words a lesson shares with a person's entry to be about the same thing (or half of a short entry's)
SAME_TOPIC_COSINE = 0.5  # or, where the MiniLM is installed, this close in meaning (other words for the same thing)

CONTRADICTION = "skipped: a contradiction"  # a lesson on a person's entry, held back and named in the review
Kind = Literal["preference", "fact", "procedure", "one-off", "not-theirs"]


class Candidate(_Strict):
    """The quote comes first: written first under the grammar, it leads the model to the lesson."""

    quote: str = Field(max_length=240, description="the exact words from a USER line that show the lesson")
    kind: Kind
    lesson: str = Field(max_length=160, description="one short sentence to remember")
    steps: list[str] = Field(default_factory=list, max_length=6,
                             description="procedure only: the commands that worked, in order")


class Lessons(_Strict):
    """Bounded lengths: under the grammar a small model cannot ramble on for minutes."""

    lessons: list[Candidate] = Field(max_length=3)


class Replaces(_Strict):
    replaces: bool


class StillHolds(_Strict):
    still_holds: bool


class Sort(_Strict):
    """A forced choice, not a yes/no: asked "should this be remembered?", the 1.5B model said yes
    to 137 of 151 sentences of the development set (that question is no longer asked). The labels
    are the question itself (from now on, or just now): labelled task/thanks/lasting the same
    model called 15 sentences lasting and found 10 of 36 expected lessons; labelled so, 30 and 20
    (the order of the labels made no difference)."""

    kind: Literal["from_now_on", "just_now", "thanks"]


class Plain(_Strict):
    """A sentence of chat rewritten as plain, complete English: only ever sorted, never written."""

    plain: str = Field(max_length=400)


LESSONS_PROMPT = """You read a conversation between a person (USER) and their assistant. List what the assistant \
should know in FUTURE conversations with this person: not what was done today.
For each lesson: copy the few exact words of a USER line that show it (quote: only those words, not the whole \
line), give its kind, write the lesson as one short sentence, and for a procedure list the commands from TOOL CALL \
lines that worked, in order (steps; otherwise []).
Kinds:
- preference: how the person wants things done from now on, or something lasting about them (their tools, \
setup, habits, language, where and how they work)
- fact: a lasting fact about their machines, projects, services or team
- procedure: commands the assistant ran (TOOL CALL) that worked after failed tries, or that the person approved
- one-off: a request for today's task (even one that was done), a temporary situation, a failure that \
happened once, a name, count or id of today
- not-theirs: someone else's words, a tool's output, a pasted document, or a guess of the assistant the person \
did not confirm
If the person later took something back or changed it, only their later words count.
Never copy passwords, keys or tokens. At most 3 lessons. Answer only JSON.

Example. The conversation:
USER: Rename report.txt to report-2025.txt. fwiw i do everything in fish shell
ASSISTANT: `mv report.txt report-2025.txt`
The answer:
{"lessons": [{"quote": "i do everything in fish shell", "kind": "preference", "lesson": "Uses the fish shell for \
everything.", "steps": []}, {"quote": "Rename report.txt to report-2025.txt", "kind": "one-off", "lesson": \
"Renamed report.txt.", "steps": []}]}
Nothing worth keeping: {"lessons": []}"""

REPLACES_PROMPT = """A memory entry the person wrote earlier, and what the person said now. Answer {"replaces": true} \
only if the person's words say the old entry is wrong or out of date and theirs replaces it; else \
{"replaces": false}. Answer only JSON."""


STILL_HOLDS_PROMPT = """What a person said earlier in a conversation, and what they said later on the same topic. \
Answer {"still_holds": true} only if their earlier words still hold after the later ones (the later words do not \
take them back, change them or replace them); else {"still_holds": false}. Answer only JSON."""


SORT_PROMPT = """A person wrote one sentence to their assistant. Does it hold something the assistant should keep \
in mind from now on, in later conversations, or does it only concern what is being done just now?
- from_now_on: how the person wants things done in general (always, never, usually, from now on, "I use ..."), \
a correction of the assistant's habits, or a fact about the person, their work, their tools, their team or their \
projects that stays true
- just_now: a request or question about the job at hand, today's files, names, numbers or errors; something true \
only today or this week
- thanks: thanks, approval, small talk
Examples:
"Rename report.pdf to final.pdf." -> {"kind": "just_now"}
"Please always answer in German." -> {"kind": "from_now_on"}
"Great, thanks." -> {"kind": "thanks"}
"Our servers all run Debian." -> {"kind": "from_now_on"}
"The build failed, why?" -> {"kind": "just_now"}
"I'm in Berlin until Friday." -> {"kind": "just_now"}
Answer only JSON."""


PLAIN_PROMPT = """Rewrite a chat message as one or more plain, complete, formal English sentences: fix spelling \
and grammar, expand abbreviations and slang, keep every piece of information and its meaning, add \
nothing. Answer only JSON.
Example: "fwiw i do everything in fish shell lol, pls dont gimme bash stuff" -> {"plain": "For what it is worth, \
I do everything in the fish shell. Please do not give me bash commands."}"""


# -- what the conversation holds, by who said it ---------------------------------------------------
_PASTE_START = re.compile(r"^\s*(```|~~~|---\s*$|#{1,6} |> |<!--|(from|to|cc|subject|date|sent):\s)", re.I)
# "here is what ops sent me:", "On Monday, Ana wrote:": what follows the colon someone else wrote
_PASTE_INTRO = re.compile(r"\b(?!(?:i|we)\b)[\w'’]+\s+(sent|wrote|forwarded|posted|replied|mailed|e-?mailed|says|said|"
                          r"writes|shared)\b(\s+(me|us|this|the following|earlier|today))*\s*:", re.I)


# a line of a chat log pasted in: "Tomasz (secops) 09:12: ...", "[09:12] jo: ...", "jo, 09:12: ..."
_CHAT_LINE = re.compile(r"^\s*(\[\d{1,2}:\d{2}(:\d{2})?\]\s*[^:\s][^:]{0,30}:\s"  # [09:12] a name:
                        r"|[^\s:(]+(\s+[^\s:(]+)?(\s*\([^)]{1,30}\))?,?\s+\d{1,2}:\d{2}(:\d{2})?\s*:\s)")  # a name 09:12:


def own_words(text: str) -> str:
    """The person's own words in a turn: what comes before a pasted document (a fence, a rule, a
    heading, a quote block, mail headers, or a colon after "… sent me", "… wrote"), where text
    someone else wrote begins; a pasted line of a chat log is left out on its own."""
    kept = []
    for line in str(text).splitlines():
        if _CHAT_LINE.match(line):
            continue
        if _PASTE_START.match(line):
            break
        intro = _PASTE_INTRO.search(line)
        if intro:
            kept.append(line[:intro.end()])
            break
        kept.append(line)
    return "\n".join(kept)


def said(messages: list[dict]) -> Said:
    """Turns from parsed session messages: the person's own words; the assistant's answers, the
    commands its tool calls ran and the skills it opened. Tool results are left out."""
    turns = []
    for m in messages:
        if m["role"] == "user" and m.get("content"):
            turns.append(Turn("person", own_words(m["content"])))
        elif m["role"] == "assistant":
            calls = m.get("tool_calls") or []
            commands = [_command(c) for c in calls if c["function"]["name"] != "skill_view"]
            skills = [_arg(c, "name") for c in calls if c["function"]["name"] == "skill_view"]
            turns.append(Turn("assistant", str(m.get("content") or ""), [c for c in commands if c],
                              [s for s in skills if s]))
    return Said(turns)


def _arg(call: dict, key: str) -> str:
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
    except (json.JSONDecodeError, TypeError):
        return ""
    value = args.get(key) if isinstance(args, dict) else None
    return value if isinstance(value, str) else ""


def _command(call: dict) -> str:
    """What a tool call ran: a shell command as written, else the call's arguments."""
    return _arg(call, "command") or str(call["function"]["arguments"] or "")


# -- agreement and memory ------------------------------------------------------------------------------
def similar(a: str, b: str, share: float) -> bool:
    wa, wb = tokens(a), tokens(b)
    return bool(wa and wb) and len(wa & wb) >= share * len(wa | wb)


def _same(a: Verdict, b: Verdict) -> bool:
    if a.located and b.located:
        return a.sentence == b.sentence
    return (similar(a.lesson, b.lesson, SAME_LESSON) or norm(a.quote) in norm(b.quote)
            or norm(b.quote) in norm(a.quote) or bool(a.sentence and a.sentence == b.sentence))


@dataclass
class Group:
    """One lesson as the samples proposed it: its best wording, how many samples proposed it as
    lasting, and how many proposed it at all (as a one-off too) with every guard passed."""

    best: Verdict
    lasting: int
    proposed: int
    second_opinion: str = ""  # what kept it when too few samples proposed it as lasting


def grouped(samples: list[list[Verdict]]) -> list[Group]:
    """Lessons that passed every guard (one per sample at most), each in the wording that shares
    most words with the others' (the person's latest words first, then the fullest), its kind the
    one most samples gave (a procedure or a memory entry); a lasting wording before a one-off's."""
    groups: list[tuple[list[Verdict], set[int], set[int]]] = []  # members, samples lasting, samples at all
    for n, sample in enumerate(samples):
        for v in sample:
            if not (v.kept or v.only_kind):
                continue
            group = next((g for g in groups if any(_same(m, v) for m in g[0])), None)
            if group is None:
                group = ([], set(), set())
                groups.append(group)
            group[0].append(v)
            group[2].add(n)
            if v.kept:
                group[1].add(n)
    out = []
    for members, lasting, seen in groups:
        pool = [m for m in members if m.kept] or members
        kinds = Counter(m.kind == "procedure" for m in pool)
        procedure = kinds[True] > kinds[False]
        pool = [m for m in pool if (m.kind == "procedure") == procedure]
        best = max(pool, key=lambda m: (m.turn, sum(len(stems(m.lesson) & stems(o.lesson)) for o in pool if o is not m),
                                        len(stems(m.lesson)), m.lesson))
        if procedure:
            best.steps = list(dict.fromkeys(s for m in pool for s in m.steps))
        out.append(Group(best, len(lasting), len(seen)))
    return out


def agreed(samples: list[list[Verdict]], need: int) -> list[Group]:
    """Lessons at least `need` samples proposed as lasting."""
    return [g for g in grouped(samples) if g.lasting >= need]


def held(overlay: OverlayFiles, cfg) -> list[str]:
    """Every entry memory holds now (all files)."""
    out = []
    for name in memory.list_memory(overlay):
        try:
            out += [e.text for e in memory.load(overlay, name, cfg).entries]
        except InputError:
            continue
    return out


def gist(entry: str) -> list[str]:
    """What an entry says, for telling repeats: the lesson and each text quoted with it, apart (an
    entry this module wrote carries both), or the entry as it is."""
    quoted = re.findall("“([^”]*)”", entry)
    if not quoted:
        return [entry]
    cut = entry.rfind(" (", 0, entry.find("“"))  # where the quoted words begin, after the lesson
    head = entry[:cut].strip() if cut > 0 and entry.rstrip().endswith(")") else ""
    return [x for x in [head, *quoted] if x and not x.startswith("The user said:")]


def same_topic(lesson: str, entry: str) -> bool:
    """A lesson and an entry about the same thing (neither a repeat of the other)."""
    theirs = stems(entry)
    shared = stems(lesson) & theirs
    return (len(shared) >= SAME_TOPIC or (len(shared) >= 1 and len(shared) >= len(theirs) / 2)) and not any(similar(lesson, g, DUPLICATE_ENTRY) for g in gist(entry))


# -- the task the pipeline drives ------------------------------------------------------------------------
@dataclass
class LessonTask:
    """The pipeline's model conversation in lessons-first mode (the same `ask` as ModelTask).

    The first ask draws the samples and writes the agreed lessons. A follow-up ask (the checks
    refused something) cannot be fixed by code, so it takes back the last lesson written and
    writes the rest again."""

    model: Model
    tools: ToolBox
    overlay: OverlayFiles
    conversation: Said
    config: object
    samples: int = SAMPLES
    agree: int = AGREE
    temperature: float = TEMPERATURE
    people: list[PersonEntry] = field(default_factory=list)  # entries a person wrote, at the base
    session: str = ""
    fix_hint: str = ""
    messages: list[dict] = field(default_factory=list)
    answer: str = ""
    usage: Usage = field(default_factory=Usage)
    applied: list[Applied] = field(default_factory=list)
    verdicts: list[list[Verdict]] = field(default_factory=list)  # each sample's candidates, judged
    invalid_answers: int = 0
    _kept: list[Group] = field(default_factory=list)
    _before: dict[str, bytes | None] = field(default_factory=dict)
    _answers: dict[tuple[str, str], bool] = field(default_factory=dict)  # the yes/no judgements asked
    _steps_written: list[set[str]] = field(default_factory=list)  # each skill's commands, this review
    _sorts: dict[tuple[int, str], str] = field(default_factory=dict)  # each of the person's sentences, sorted

    def ask(self, text: str, fresh: bool = False) -> str:
        if self.verdicts and not fresh:  # the checks refused: drop the last lesson, keep the rest
            self._kept = self._kept[:-1]
        else:
            self._before = dict(self.overlay.changes)
            self._draw(text)
        self.overlay.changes.clear()
        self.overlay.changes.update(self._before)
        self._write()
        return self.answer

    def _draw(self, text: str) -> None:
        ask = [{"role": "system", "content": LESSONS_PROMPT}, {"role": "user", "content": text}]
        self.messages = list(ask)  # the record: the request, then every sample's answer
        fmt = response_format(Lessons)
        self.verdicts = []

        def draw(_n: int):
            return self.model.complete(ask, [], response_format=fmt, temperature=self.temperature)

        # all at once: a local server decodes its parallel slots as one batch, far cheaper than in turn
        with ThreadPoolExecutor(max_workers=self.samples) as pool:
            replies = list(pool.map(draw, range(self.samples)))
        for reply in replies:
            self.usage.add(reply.usage)
            self.messages.append({"role": "assistant", "content": reply.content or ""})
            try:
                doc = parse_document(reply.content, Lessons)
            except DocumentError:
                self.invalid_answers += 1
                self.verdicts.append([])
                continue
            self.verdicts.append([guards.judge(c.quote, c.lesson, c.kind, c.steps, self.conversation)
                                  for c in doc.lessons])  # type: ignore[attr-defined]
        if self.invalid_answers == self.samples:
            raise LearningError(f"lessons: none of the model's {self.samples} answers was a list of lessons in JSON")
        need = min(self.agree, self.samples)
        sorts = self._sorts = self._sort()
        lasting = {place for place, kind in sorts.items() if kind == "from_now_on"}
        groups = grouped(self.verdicts)  # once: the agreed, then the rest on a second opinion
        self._kept = self._agreed([g for g in groups if g.lasting >= need], sorts)
        self._kept += [g for g in groups if g.lasting < need and g.best.kind != "procedure" and self._lasting(g, lasting)]
        covered = {(g.best.turn, p) for g in self._kept for p in guards.sentences(g.best.sentence)}
        for run in self._runs(lasting - covered):  # sorted as lasting, no sample proposed them: their own words
            for part in ([run] if len(run) == 1 else [run, *[[place] for place in run]]):
                turn, text = part[0][0], " ".join(s for _t, s in part)
                v = self._said_alone(text, turn, "fact")
                if v is not None and (v.turn, v.sentence) not in covered:
                    why = "the model, shown the sentence alone, sorted it as lasting" if len(part) == 1 else \
                        "the model, shown each sentence alone, sorted them as lasting"
                    self._kept.append(Group(v, 0, 0, why))
                    covered.update(part)
                    break  # the run as one entry, else its sentences one by one

    def _said_alone(self, text: str, turn: int, kind: str) -> Verdict | None:
        """The person's own words in `turn` as an entry of their own ("The user said: “…”"), when
        every guard passes them there; else None."""
        v = guards.judge(text, text, kind, [], self.conversation)
        if not v.kept or v.turn != turn:
            return None
        v.located = True
        return v

    def _runs(self, places: set[tuple[int, str]]) -> list[list[tuple[int, str]]]:
        """Consecutive sentences of one turn among `places`, in order: "I have no root here. Use
        user-level installs." is one statement, and "No exceptions." means nothing alone."""
        runs: list[list[tuple[int, str]]] = []
        last = None
        for place in self.conversation.person():
            if place not in places:
                last = None
                continue
            if last is not None and last[0] == place[0]:
                runs[-1].append(place)
            else:
                runs.append([place])
            last = place
        return runs

    def _write(self) -> None:
        self.applied, self._steps_written = [], []
        existing = held(self.overlay, self.config)
        for g in self._kept:
            v = g.best
            reason = (f'the user said: "{v.sentence or v.quote}" ({_votes(g, self.samples, self.agree)})'
                      if v.turn >= 0 else f"it worked in the conversation ({_votes(g, self.samples, self.agree)})")
            later = self._later(v)
            if later and not self._still_holds(v, later):
                self.applied.append(Applied(f"memory/{v.file}", f"add {v.lesson!r}", reason,
                                            f"skipped: the person came back to this later (“{later[-1][:80]}”) and "
                                            "their earlier words were not shown to still hold"))
                continue
            if v.kind == "procedure":
                commands = grounded_steps(v.steps + [v.lesson], self.conversation) or \
                    (endorsed_steps(v, self.conversation) if not v.steps else [])  # steps named that never ran: none
                if not commands:
                    self.applied.append(Applied("skills", f"add {v.lesson!r}", reason,
                                                "skipped: a procedure whose steps are not commands the assistant ran"))
                else:
                    self._procedure(v, reason, commands)
                continue
            self._memory(v, reason, existing)
            commands = endorsed_steps(v, self.conversation)
            if commands:  # lasting words about what just ran: the procedure becomes a skill too
                self._procedure(v, reason, commands)
        done = [a for a in self.applied if a.ok]
        if not done:
            self.answer = "Summary: nothing to change"
            return
        summary = "learn: " + "; ".join(a.what.split(" ", 1)[-1].strip("'\"") for a in done)
        kept_back = [a for a in self.applied if a.result.startswith(CONTRADICTION)]  # shown to the reviewer, not written
        self.answer = "\n".join([f"Summary: {summary[:120]}",
                                 *[f"- {a.path}: {a.what} (because {a.reason})" for a in done],
                                 *[f"- held, not written: {a.what} in {a.path}: {a.result.removeprefix('skipped: ')} "
                                   f"(because {a.reason})" for a in kept_back]])

    def _memory(self, v: Verdict, reason: str, existing: list[str]) -> None:
        what = f"add {v.lesson!r}"
        if any(similar(v.lesson, s, DUPLICATE_ENTRY) or (v.sentence and similar(v.sentence, s, DUPLICATE_ENTRY))
               for old in existing for s in gist(old)):
            self.applied.append(Applied(f"memory/{v.file}", what, reason, "skipped: memory already holds this lesson"))
            return
        theirs = self._theirs(v)
        if theirs is not None:
            if not self._person_replaces(theirs, v):
                self.applied.append(Applied(f"memory/{theirs.file}", what, reason,
                                            f"{CONTRADICTION}: it is about the person's own entry "
                                            f"“{theirs.text[:100]}”, which only the person changes"))
                return
            args = {"action": "replace", "file": theirs.file, "old_text": theirs.text, "text": v.entry}
            what = f"replace {theirs.text[:60]!r} with {v.lesson!r}"
            result = self._call("memory", args)
            self.applied.append(Applied(f"memory/{theirs.file}", what, reason, result))
        else:
            result = self._call("memory", {"action": "add", "file": v.file, "text": v.entry})
            self.applied.append(Applied(f"memory/{v.file}", what, reason, result))
        if result.startswith("ok"):
            existing.append(v.lesson)

    def _theirs(self, v: Verdict) -> PersonEntry | None:
        """The person's entry the lesson is about: sharing its topic words, or, where the MiniLM is
        installed, close to it in meaning ("moved to the payments group" and "works on the billing
        team" share no word)."""
        people = [p for p in self.people if not any(similar(v.lesson, g, DUPLICATE_ENTRY) for g in gist(p.text))]
        found = next((p for p in people if same_topic(v.lesson, p.text) or (v.sentence and same_topic(v.sentence, p.text))),
                     None)
        if found is not None or not people or not embeddings.available():
            return found
        vectors = embeddings.model().encode([v.lesson] + [p.text for p in people])
        closeness = [float(vectors[0] @ row) for row in vectors[1:]]
        best = max(range(len(people)), key=closeness.__getitem__)
        return people[best] if closeness[best] >= SAME_TOPIC_COSINE else None

    def _person_replaces(self, theirs: PersonEntry, v: Verdict) -> bool:
        """The person's words say their entry is out of date (asked once; only a clear yes counts)."""
        return self._confirm(Replaces, REPLACES_PROMPT, f"The entry: {theirs.text}\nThe person now: {v.sentence}",
                             "replaces")

    def _agreed(self, agreed: list[Group], sorts: dict[tuple[int, str], str]) -> list[Group]:
        """The lessons the samples agree on that stand: all but those whose every sentence was
        sorted as for just now and whose lesson, sorted alone (all such lessons at once), is too:
        samples of a small model agree on today's details ("The invoice number is 42") that the
        sort sees for what they are."""
        def for_now(v: Verdict) -> bool:
            parts = guards.sentences(v.sentence) if v.kind != "procedure" and v.turn >= 0 else []
            return bool(parts) and all(sorts.get((v.turn, p)) == "just_now" for p in parts)

        doubtful = [g for g in agreed if for_now(g.best)]
        lasts = dict(zip(map(id, doubtful), self._sorted([g.best.lesson for g in doubtful]), strict=True)) \
            if doubtful else {}
        for g in doubtful:
            if lasts[id(g)] == "from_now_on":
                g.second_opinion = "its sentence was sorted as for just now, the lesson itself as from now on"
        return [g for g in agreed if lasts.get(id(g), "from_now_on") == "from_now_on"]

    def _lasting(self, g: Group, sorted_lasting: set[tuple[int, str]]) -> bool:
        """A lesson fewer than `agree` samples proposed as lasting stands only when its sentence
        was sorted as lasting (which also overrules samples that all called it a one-off). No
        yes/no question decides it: asked "should the assistant remember this?", the 1.5B model
        said yes to 137 of 151 sentences of the development set; with that yes deciding, a
        development run kept 2 more of 46 lessons and let 3 of 61 traps in."""
        v = g.best
        if v.turn >= 0 and (v.turn, v.sentence) in sorted_lasting:
            if not v.kept:  # judged a one-off by every sample: the sort of the sentence overrules it, and
                # the entry is the person's sentence, not a lesson written as a one-off ("Created the query.")
                w = self._said_alone(v.sentence, v.turn, "preference" if v.file == "USER.md" else "fact")
                if w is None:
                    return False
                g.best = w
            g.second_opinion = "the model, shown the sentence alone, sorted it as lasting"
            return True
        return False

    def _sort(self) -> dict[tuple[int, str], str]:
        """How the model, shown each of the person's sentences alone, sorts it: from_now_on,
        just_now or thanks (a forced choice at temperature 0). A lesson too few samples proposed
        as lasting stands on a sentence sorted from now on (see `_lasting`), one no sample proposed
        is kept in the person's own words, and one the samples agree on gets a second look when its
        sentence was sorted as for just now (see `_agreed`). Garbage or an error sorts as nothing."""
        said = self.conversation.person()[-SORTED_SENTENCES:]
        kinds = self._sorted([s for _i, s in said])
        again = [n for n, kind in enumerate(kinds) if kind == "just_now"]
        rewritten = [(n, p) for n, p in zip(again, self._plain([said[n][1] for n in again]), strict=True) if p]
        asks = [(n, piece) for n, p in rewritten for piece in _pieces(p)]
        for (n, _p), kind in zip(asks, self._sorted([p for _n, p in asks]), strict=True):
            if kind == "from_now_on":
                kinds[n] = kind
        return {place: kind for place, kind in zip(said, kinds, strict=True) if kind}

    def _plain(self, texts: list[str]) -> list[str]:
        """Each text rewritten as plain, complete English, in parallel; "" for garbage or an error.
        Shown alone, the 1.5B model sorts chat-style sentences as "just now" ("we're rust-only on
        the platform team", "our fiscal year starts 1 april"): of the 14 development cases in that
        style it sorted 2 of 67 sentences from now on. A sentence it sorts "just now" is sorted
        again as the rewrite says it, and counts as lasting when either sort says so: on the
        development set 23 of 45 expected lessons in a sentence kept (21 without), the same 3 of 61
        trap sentences (retractions, which the later-words guard handles). The rewrite only decides
        the sort: what is written is always the person's own sentence."""
        return [" ".join(p.split()) for p in self._each(PLAIN_PROMPT, Plain, "plain", texts)]

    def _sorted(self, texts: list[str]) -> list[str]:
        """Each text sorted alone, in parallel; "" for garbage or an error."""
        return self._each(SORT_PROMPT, Sort, "kind", texts)

    def _each(self, prompt: str, schema, field_name: str, texts: list[str]) -> list[str]:
        """`field_name` of the model's answer to each text asked alone (as a JSON string, at
        temperature 0), in parallel; "" for garbage or an error."""
        def ask_one(text: str):
            ask = [{"role": "system", "content": prompt}, {"role": "user", "content": json.dumps(text, ensure_ascii=False)}]
            try:
                return self.model.complete(ask, [], response_format=response_format(schema), temperature=0.0)
            except HermesError:
                return None

        with ThreadPoolExecutor(max_workers=max(1, self.samples)) as pool:
            replies = list(pool.map(ask_one, texts))
        out = []
        for reply in replies:
            value = ""
            if reply is not None:
                self.usage.add(reply.usage)  # counted here, in one thread
                self.messages.append({"role": "assistant", "content": reply.content or ""})
                try:
                    value = getattr(parse_document(reply.content, schema), field_name)
                except DocumentError:
                    pass
            out.append(value)
        return out

    def _later(self, v: Verdict) -> list[str]:
        """The person's later words on the topic, leaving out what the sort called thanks: "perfect,
        pasted." after "anything on the wiki has to be png" shares a word with it and takes nothing
        back, yet asked whether the earlier words still hold (`_still_holds`) a small model says no.
        A later sentence the sort did not see or could not sort still counts."""
        thanks = {s for (turn, s), kind in self._sorts.items() if kind == "thanks" and turn > v.turn}
        return [s for s in v.later if s not in thanks]

    def _still_holds(self, v: Verdict, later: list[str]) -> bool:
        """The person's later words on the topic leave the earlier ones standing (asked once; only
        a clear yes counts)."""
        said_later = "\n".join(f"- {s}" for s in later[-3:])
        return self._confirm(StillHolds, STILL_HOLDS_PROMPT, f"Earlier: {v.sentence}\nLater:\n{said_later}",
                             "still_holds")

    def _confirm(self, schema, prompt: str, text: str, field_name: str) -> bool:
        """One yes/no judgement of the model at temperature 0; no clear yes (a no, garbage, an
        error) is a no."""
        key = (field_name, text)
        if key not in self._answers:
            ask = [{"role": "system", "content": prompt}, {"role": "user", "content": text}]
            try:
                reply = self.model.complete(ask, [], response_format=response_format(schema), temperature=0.0)
                self.usage.add(reply.usage)
                self.messages.append({"role": "assistant", "content": reply.content or ""})
                self._answers[key] = getattr(parse_document(reply.content, schema), field_name) is True
            except (DocumentError, HermesError):
                self._answers[key] = False
        return self._answers[key]

    def _procedure(self, v: Verdict, reason: str, commands: list[str]) -> None:
        """A procedure into a skill of `commands`, which the assistant really ran (a new skill, or
        a patch of the one the conversation used)."""
        if any(set(commands) <= done for done in self._steps_written):
            self.applied.append(Applied("skills", f"add {v.lesson!r}", reason,
                                        "skipped: a skill written in this review holds these steps"))
            return
        self._steps_written.append(set(commands))
        existing = skills_at(self.overlay)
        change = skill_change(v, commands, self.conversation, existing, self.session)
        if change.action == "create":
            result = self._call("skill_manage", {"action": "create", "name": change.name, "content": change.content})
            twin = _twin(result)
            if twin and twin in existing:  # a near twin exists: the procedure is added to it
                change.action, change.name = "patch", twin
                change.new_text = learned_section(v, commands, self.session)
        if change.action == "patch":
            text = (self.overlay.read(f"skills/{change.name}/SKILL.md") or b"").decode("utf-8", "replace")
            if all(c in text for c in commands):
                self.applied.append(Applied(f"skills/{change.name}/SKILL.md", f"patch skill {change.name}", reason,
                                            "skipped: the skill already holds these steps"))
                return
            tail = next((ln for ln in reversed(text.splitlines()) if ln.strip() and text.count(ln) == 1), "")
            result = self._call("skill_manage", {"action": "patch", "name": change.name, "old_text": tail,
                                                 "new_text": tail + "\n" + change.new_text}) if tail else \
                "error: the skill has no unique line to add after"
        self.applied.append(Applied(f"skills/{change.name}/SKILL.md", f"{change.action} skill {change.name}",
                                    reason, result))

    def _call(self, tool: str, args: dict) -> str:
        text = " ".join(str(a) for a in args.values())
        if self.conversation.holds_secret(text):  # a last screen: nothing code writes holds a credential
            return "skipped: it would write a credential"
        return self.tools.call(tool, json.dumps(args))

    def left_out(self) -> str:
        """What code left out, counted by why (the review's explanation of an empty result)."""
        why = Counter(v.why for sample in self.verdicts for v in sample if not v.kept)
        kept = {id(g.best) for g in self._kept}
        lone = sum(0 < g.lasting < self.agree and id(g.best) not in kept for g in grouped(self.verdicts))
        if lone:
            why[f"proposed as lasting by fewer than {self.agree} of the {self.samples} answers, and not confirmed "
                "as lasting"] += lone
        why.update(a.result.removeprefix("skipped: ") for a in self.applied if a.skipped)
        if not why:
            return ""
        return "code left out the lessons the model proposed: " + "; ".join(
            f"{n} because {w}" if n > 1 else w for w, n in why.most_common())

    def rejected(self) -> list[str]:
        """Each candidate code left out, and why (for the bench and the review)."""
        return [f"sample {n + 1}: {v.lesson!r} ({v.why})" for n, s in enumerate(self.verdicts) for v in s if not v.kept]


def _pieces(plain: str) -> list[str]:
    """What of a rewrite is sorted: the whole, and each of its sentences when it has several. A
    request with a standing preference inside it, rewritten, is still mostly a request ("Please
    keep it to plain selects. I only have a read-only role on the production replica."); its second
    sentence alone is not. On the development set, sorting the pieces too found 36 of 60 expected
    lessons where the whole alone found 30, with the same one trap of 84."""
    parts = sentences(plain)
    return [plain, *parts] if len(parts) > 1 else [plain]


def _votes(g: Group, samples: int, agree: int) -> str:
    """How the samples and the second opinion judged a kept lesson (its reason, for review)."""
    if g.lasting >= agree:
        return f"{g.lasting} of {samples} samples: {g.best.kind}" + (f"; {g.second_opinion}" if g.second_opinion else "")
    if g.proposed == 0:
        return f"no sample proposed it; {g.second_opinion}"
    if g.lasting == 0:
        return f"{g.proposed} of {samples} samples proposed it as a one-off; {g.second_opinion}"
    return f"{g.lasting} of {samples} samples: {g.best.kind}; {g.second_opinion}"


def _twin(result: str) -> str:
    """The existing skill a refused create nearly duplicates (the duplicate guard names it)."""
    m = re.search(r"nearly duplicates the existing skill '([^']+)'", result)
    return m.group(1) if m else ""


__all__ = ["Candidate", "Group", "LessonTask", "Lessons", "Said", "Turn", "Verdict", "agreed", "gist", "grouped", "held",
           "own_words", "said", "sentences"]
