"""A person's text, protected by code: a learned change may remove or rewrite a memory entry a
person wrote only with evidence, a quote of the person that is found verbatim in what they said in
the conversation (their own turns, never a tool's output or the assistant's words).

Authorship is git's: the author of the entry's first line at the change's base commit (`git
blame`), and every commit the agent makes is authored by the agent (store/provenance.py), so an
entry not authored by the agent is a person's. A change to a person's entry without such a quote
is taken out of the change (the entry is put back as it was) and named, so the review says so.
Entries the agent wrote itself may be replaced or removed; the reason the change gives is enough.

No prompt decides this: a model that ignores every instruction can still only add entries, or
rewrite its own, unless it quotes the person.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InputError
from ..mind.memory import Unit, units
from ..mind.merge import merge_memory, side_changes
from ..store.docs import decode, parse_doc
from ..store.overlay import OverlayFiles
from ..store.vault import Vault
from .validate import tokens

MIN_QUOTE_WORDS = 3  # shorter quotes ("yes", "do it") are found in any conversation
GROUNDED_SHARE = 1 / 3  # of a new entry's words the person must have used, when its reason quotes nothing


@dataclass
class Evidence:
    """What a proposer can show: the person's turns in the conversation (None: there was no
    conversation, so nothing can justify changing a person's entry) and the reasons it gave,
    per file (`memory/USER.md` -> lines)."""

    said: list[str] | None = None
    reasons: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Touched:
    """A person's entry that the change removes (`new` None) or rewrites."""

    path: str
    old: str
    new: str | None
    quote: str | None = None  # the person's words that justify it, as found in the conversation

    def line(self) -> str:
        """The review's line for a change taken out of the branch."""
        what = "removing" if self.new is None else "rewriting"
        return (f"- {self.path}: kept the entry a person wrote, {_brief(self.old)!r}: the change {what} it quoted "
                "nothing the person said in the conversation (a person's entry changes only when they say so)")


@dataclass
class Guarded:
    kept: list[Touched] = field(default_factory=list)  # taken out of the change: the entry stays
    changed: list[Touched] = field(default_factory=list)  # person's entries changed, with a verified quote


def guard(vault: Vault, overlay: OverlayFiles, evidence: Evidence) -> Guarded:
    """Take out of `overlay` every change to a person's memory entry that lacks a verified quote."""
    out = Guarded()
    for path, data in sorted(overlay.effective_changes().items()):
        if not (path.startswith("memory/") and path.endswith(".md")):
            continue
        old_bytes = overlay.store.read_file(overlay.commit, path)
        if old_bytes is None:
            continue
        touched = person_changes(vault, overlay.commit, path, old_bytes, data)
        if not touched:
            continue
        blocked: set[int] = set()
        for i, t in touched.items():
            t.quote = verified_quote(evidence, t)
            (out.changed if t.quote else out.kept).append(t)
            if not t.quote:
                blocked.add(i)
        if blocked:
            overlay.write(path, _without(path, old_bytes, data, frozenset(blocked)))
    return out


def person_changes(vault: Vault, commit: str, path: str, old: bytes, new: bytes | None) -> dict[int, Touched]:
    """Base entries (index among entries) a person wrote that `new` removes or rewrites."""
    try:
        old_text = decode(old, path)
        new_text = decode(new, path) if new is not None else ""
        old_doc = parse_doc(old_text, path)
        new_body = parse_doc(new_text, path).body if new is not None else ""
    except InputError:
        return {}
    base = units(old_doc.body, old_doc.body_start)
    entries = [u for u in base if u.kind == "entry"]
    fates = side_changes(base, units(new_body)).fate if new is not None else dict.fromkeys(range(len(entries)))
    if not fates:
        return {}
    blame = vault.git.blame_authors(commit, path)
    agent = vault.provenance.agent()
    out = {}
    for i, fate in fates.items():
        line = old_text.count("\n", 0, entries[i].start)
        author = blame[line][0] if line < len(blame) else ""
        if author != agent:
            out[i] = Touched(path, _raw(entries[i]), fate.rstrip("\r\n") if fate is not None else None)
    return out


def _raw(u: Unit) -> str:
    return u.raw.rstrip("\r\n")


def _without(path: str, old: bytes, new: bytes | None, blocked: frozenset[int]) -> bytes:
    """`new` with the changes to the `blocked` base entries undone (the whole file's change undone
    when the rest cannot be kept apart, e.g. the file was deleted or its headings rewritten)."""
    if new is None:
        return old
    merged = merge_memory(path, decode(old, path), decode(old, path), decode(new, path), skip=blocked)
    return merged.text.encode("utf-8") if merged.text is not None else old


def verified_quote(evidence: Evidence, touched: Touched) -> str | None:
    """A quote, in a reason given for this file that is about this entry, that the person said."""
    if not evidence.said:
        return None
    said = [_norm(s) for s in evidence.said]
    about = tokens(touched.old + " " + (touched.new or ""))
    for reason in evidence.reasons.get(touched.path, []):
        if about and not tokens(reason) & about:
            continue
        for quote in quotes(reason):
            q = _norm(quote)
            if len(q.split()) >= MIN_QUOTE_WORDS and any(q in s for s in said):
                return quote.strip()
    return None


def grounded(reason: str, text: str, said: list[str], done: list[str] = ()) -> bool:  # type: ignore[assignment]
    """A new entry stands on the conversation: its reason quotes the person verbatim, or a good
    share of its words are the person's or the assistant's own (what it answered, the commands it
    ran). An entry drawn only from a tool's output (a web page, a failure message, where injected
    instructions and one-off details live) is neither."""
    if any(len(_norm(q).split()) >= MIN_QUOTE_WORDS and any(_norm(q) in _norm(s) for s in said) for q in quotes(reason)):
        return True
    words = tokens(text)
    theirs = tokens(" ".join([*said, *done]))
    return bool(words) and len(words & theirs) >= GROUNDED_SHARE * len(words)


_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|‘([^’]+)’|`([^`]+)`|(?<![A-Za-z])\'([^\']+)\'(?![A-Za-z])')
_SAID = re.compile(r"\b(?:said|says|wrote|asked|told (?:me|us|you))\b\s*:?\s*(.+)$", re.I | re.S)


def quotes(reason: str) -> list[str]:
    """The candidate quotes in a reason: quoted spans, what follows "said", the whole reason."""
    found = [next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(reason)]
    said = _SAID.search(reason)
    if said:
        found.append(said.group(1))
    found.append(reason)
    return [q for q in found if q.strip()]


def _norm(text: str) -> str:
    """Case, spacing, curly quotes and the punctuation at either end do not count."""
    t = text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
    return " ".join(t.lower().split()).strip(" .,;:!?\"'()")


def _brief(text: str, limit: int = 80) -> str:
    t = " ".join(text.split()).removeprefix("- ").removeprefix("* ")
    return t if len(t) <= limit else t[: limit - 3] + "..."


@dataclass
class PersonEntry:
    """A memory entry a person wrote (git blame at the base: not the agent's commit)."""

    file: str  # memory file name, e.g. USER.md
    text: str  # the entry as it reads


def person_entries(vault: Vault, commit: str, files: list[str]) -> list[PersonEntry]:
    """Every entry of the given memory files, as of `commit`, that a person wrote."""
    agent = vault.provenance.agent()
    out = []
    for name in files:
        path = f"memory/{name}"
        data = vault.git.read_file(commit, path)
        if data is None:
            continue
        try:
            text = decode(data, path)
            doc = parse_doc(text, path)
        except InputError:
            continue
        blame = vault.git.blame_authors(commit, path)
        for u in units(doc.body, doc.body_start):
            if u.kind != "entry":
                continue
            line = text.count("\n", 0, u.start)
            if line < len(blame) and blame[line][0] != agent:
                out.append(PersonEntry(name, re.sub(r"^\s*[-*+]\s+", "", _raw(u)).strip()))
    return out
