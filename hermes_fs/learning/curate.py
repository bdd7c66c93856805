"""The curator: one learned change that keeps the library small and true (`curate/<stamp>-library`).

Refine and learn only add; the curator proposes what to take away, through the same pipeline
(checks, a branch, the policy, review, revert) as any learned change:

- stale skills (unused for `curate.stale_days` and not created or edited by a person in that time,
  from `mind.usage`) move to `skills/.archive/<name>/`, out of the prompt and the index, each with
  its usage as the reason; `skills restore NAME` (or a revert) brings one back;
- near-duplicate skills (name and description words, model-free) are merged by the model into the
  one that is used more (the union of their steps); the other is archived; each pair with its
  similarity as the reason;
- a memory file over budget is consolidated by the model entry by entry (merged entries that say
  the same, entries dropped with a reason); contradictory entries in any memory file are surfaced
  and the newest kept. An entry a person wrote is never merged or dropped: what the model suggests
  for it is named in the change for the person to do (learning/protection.py enforces it anyway).

The model answers in narrow, checked shapes (a SKILL.md; a JSON list of entry ids): what it may
change is decided here, so a garbled or hostile answer changes nothing and is reported.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..agent.loop import Agent, AgentConfig
from ..agent.model import LiteLLMModel, Model, ModelSettings, Usage
from ..errors import InputError
from ..mind import memory, skills, usage
from ..mind.skills import ARCHIVE_DIR, SKILLS_DIR
from ..store.docs import decode, parse_doc
from ..store.overlay import OverlayFiles
from ..store.provenance import curate_trailers
from ..store.vault import Vault
from . import pipeline
from .pipeline import Description, LearningError, ModelTask, Outcome
from .validate import tokens

SIMILAR = 0.5  # Jaccard of name+description words at which two skills are near-duplicates
COMMON_WORD = 0.2  # a word in more than this share of skills says nothing about a pair

CURATOR_PROMPT = """You curate the memory and skills of a persistent assistant. You answer each \
request in exactly the shape it asks for and nothing else. Never invent facts; never drop a fact \
unless another entry says it (merge) or a newer entry contradicts it (say which). Today is {today}."""


@dataclass
class CurateOptions:
    policy: str | None = None  # review | auto (default: curate.policy)
    stale_days: int | None = None  # default: curate.stale_days
    now: float | None = None  # judge staleness as of this time (default: now)
    max_steps: int = 3


@dataclass
class Duplicate:
    keep: str
    other: str
    similarity: float


@dataclass
class Plan:
    """What the model-free part found (also what `status` and the benchmark report)."""

    stale: dict[str, str] = field(default_factory=dict)  # name -> reason
    duplicates: list[Duplicate] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)  # memory paths
    notes: list[str] = field(default_factory=list)  # what was left alone, and why


def find_duplicates(described: dict[str, str], uses: dict[str, int] | None = None,
                    threshold: float = SIMILAR) -> list[Duplicate]:
    """Pairs of near-duplicate skills, each skill in at most one pair, most similar first. Candidate
    pairs come from an inverted index of words (common words skipped), not from all pairs."""
    words = {n: tokens(n.replace("-", " ") + " " + d) for n, d in described.items()}
    postings: dict[str, list[str]] = {}
    for name, ws in words.items():
        for w in ws:
            postings.setdefault(w, []).append(name)
    common = max(5, int(len(words) * COMMON_WORD))
    candidates: set[tuple[str, str]] = set()
    for names in postings.values():
        if len(names) <= common:
            candidates |= {(a, b) for i, a in enumerate(names) for b in names[i + 1:]}
    scored: list[tuple[float, str, str]] = []
    for a, b in candidates:
        union = words[a] | words[b]
        sim = len(words[a] & words[b]) / len(union) if union else 0.0
        same_name = tokens(a.replace("-", " ")) == tokens(b.replace("-", " ")) and tokens(a.replace("-", " "))
        if sim >= threshold or same_name:
            first, second = sorted((a, b))
            scored.append((max(sim, 1.0 if same_name else 0.0), first, second))
    uses = uses or {}
    taken: set[str] = set()
    pairs = []
    for sim, a, b in sorted(scored, key=lambda t: (-t[0], t[1], t[2])):
        if a in taken or b in taken:
            continue
        keep, other = (a, b) if uses.get(a, 0) >= uses.get(b, 0) else (b, a)
        pairs.append(Duplicate(keep, other, round(sim, 2)))
        taken |= {a, b}
    return pairs


def plan(vault: Vault, stale_days: int | None = None, now: float | None = None,
         figures: usage.Usage | None = None) -> Plan:
    """The model-free findings on main: stale skills, duplicate pairs, memory over budget."""
    figures = figures or usage.refresh(vault)
    days = stale_days if stale_days is not None else vault.config.curate.stale_days
    names = skills.names(vault.files)
    p = Plan()
    described = {}
    for name in names:
        try:
            described[name] = skills.read(vault.files, name).description
        except InputError as exc:
            p.notes.append(f"- skills/{name}: left as it is ({exc})")
    p.duplicates = find_duplicates(described, {n: s.uses for n, s in usage.current(figures, names).items()})
    paired = {d.other for d in p.duplicates} | {d.keep for d in p.duplicates}
    p.stale = {n: why for n, why in usage.stale(figures, names, days, now).items() if n not in paired}
    for folder in sorted(_folders_without_skill(vault)):
        p.notes.append(f"- skills/{folder}/: no SKILL.md, left as it is (see `hermes-fs skills validate`)")
    for path, why in sorted(figures.unreadable.items()):
        p.notes.append(f"- {path}: not counted in usage ({why})")
    for name in memory.list_memory(vault.files):
        try:
            if memory.load(vault.files, name, vault.config).over_budget:
                p.over_budget.append(f"{memory.MEMORY_DIR}/{name}")
        except InputError as exc:
            p.notes.append(f"- memory/{name}: left as it is ({exc})")
    return p


def _folders_without_skill(vault: Vault) -> list[str]:
    base = vault.root / SKILLS_DIR
    if not base.is_dir():
        return []
    return [d.name for d in base.iterdir() if d.is_dir() and not d.name.startswith(".")
            and not (d / skills.SKILL_FILE).is_file()]


class _NoTools:
    """The curator's model only answers; it calls nothing."""

    def schemas(self) -> list[dict]:
        return []

    def call(self, name: str, raw_arguments: str) -> str:
        return "error: no tools here"


class Curator:
    """The curate proposer (see the module docstring)."""

    kind = "curate"
    task = None  # the checks' refusals are final: the curator's edits are made by code

    def __init__(self, vault: Vault, options: CurateOptions, model: Model | None):
        self.vault = vault
        self.options = options
        self.model = model
        self.lines: list[str] = []
        self.failures: list[str] = []
        self.counts = {"archived": 0, "merged": 0, "consolidated": 0, "contradictions": 0}
        self.person_left: list[str] = []  # what it would change in entries a person wrote: only suggested
        self.findings: Plan | None = None

    def base(self, vault: Vault) -> str:
        return vault.git.head()

    def propose(self, overlay: OverlayFiles) -> None:
        self.findings = found = plan(self.vault, self.options.stale_days, self.options.now)
        figures = usage.refresh(self.vault)
        for name, why in sorted(found.stale.items()):
            if self._archive(overlay, name):
                self.lines.append(f"- skills/{name}: archived to skills/{ARCHIVE_DIR}/{name}/ ({why})")
                self.counts["archived"] += 1
        several = [n for n in memory.list_memory(overlay) if self._entry_count(overlay, n) > 1]
        need_model = found.duplicates or several
        try:
            self._chat = self._conversation() if need_model else None
        except Exception as exc:  # no model to ask (a missing key, a bad setting): the model-free part stands
            self._chat = None
            self.failures.append(f"the model parts (merging duplicates, memory): {_one_line(exc)}")
        for d in found.duplicates if self._chat else []:
            self._merge_pair(overlay, d)
        for name in several if self._chat else []:
            rel = f"{memory.MEMORY_DIR}/{name}"
            self._memory(overlay, rel, figures, over=rel in found.over_budget)
        self.lines += found.notes
        if not overlay.effective_changes() and self.failures:
            raise LearningError("nothing curated: " + "; ".join(self.failures))

    def _entry_count(self, overlay: OverlayFiles, name: str) -> int:
        """Entries of a memory file; one that does not parse is left alone (plan() names it)."""
        try:
            return len(memory.load(overlay, name, self.vault.config).entries)
        except InputError:
            return 0

    @property
    def model_usage(self) -> Usage:
        """What the curator's model conversation cost (pipeline.spent)."""
        chat = getattr(self, "_chat", None)
        return chat.usage if chat is not None else Usage()

    def _conversation(self) -> ModelTask:
        self.model = self.model or LiteLLMModel(ModelSettings.for_vault(self.vault, "curate"))
        today = datetime.now(UTC).date().isoformat()
        return ModelTask(Agent(self.model, _NoTools(), AgentConfig(self.options.max_steps)),
                         CURATOR_PROMPT.format(today=today))

    # -- skills ---------------------------------------------------------------------------------
    def _archive(self, overlay: OverlayFiles, name: str) -> bool:
        target = f"{SKILLS_DIR}/{ARCHIVE_DIR}/{name}"
        if overlay.list(target):
            self.lines.append(f"- skills/{name}: not archived: skills/{ARCHIVE_DIR}/{name}/ already exists "
                              "(restore or remove that copy first)")
            return False
        for rel in overlay.list(f"{SKILLS_DIR}/{name}"):
            data = overlay.read(rel)
            overlay.write(f"{target}/{rel[len(SKILLS_DIR) + len(name) + 2:]}", data or b"")
            overlay.delete(rel)
        return True

    def _merge_pair(self, overlay: OverlayFiles, d: Duplicate) -> None:
        assert self._chat is not None
        keep_text = (overlay.read(skills.skill_path(d.keep)) or b"").decode("utf-8", "replace")
        other_text = (overlay.read(skills.skill_path(d.other)) or b"").decode("utf-8", "replace")
        try:
            answer = self._chat.ask(
                f"Two skills nearly duplicate each other (similarity {d.similarity}). Merge them into ONE "
                f"SKILL.md named `{d.keep}`: frontmatter with `name: {d.keep}` and a `description`, then the "
                "union of their steps (every step of both, none twice). Answer with the whole SKILL.md only.\n\n"
                f"### skills/{d.keep}/SKILL.md\n{keep_text}\n\n### skills/{d.other}/SKILL.md\n{other_text}",
                fresh=True)
            merged = _skill_text(answer)
            problems = skills.validate_text(d.keep, merged)
            if problems:
                raise InputError("; ".join(problems))
        except Exception as exc:  # a refused or garbled answer: this pair stays as it was
            self.failures.append(f"{d.keep}+{d.other}: {exc}")
            self.lines.append(f"- skills/{d.keep}, skills/{d.other}: near-duplicates (similarity {d.similarity}), "
                              f"not merged: the model's SKILL.md was refused ({_one_line(exc)})")
            return
        overlay.write(skills.skill_path(d.keep), merged.encode())
        self._archive(overlay, d.other)
        self.counts["merged"] += 1
        self.lines.append(f"- skills/{d.keep}: merged with {d.other} (similarity {d.similarity}); "
                          f"{d.other} archived to skills/{ARCHIVE_DIR}/{d.other}/")

    # -- memory ---------------------------------------------------------------------------------
    def _memory(self, overlay: OverlayFiles, rel: str, figures: usage.Usage, over: bool) -> None:
        assert self._chat is not None
        mem = memory.load(overlay, rel, self.vault.config)
        entries = usage.memory_entries(self.vault, figures, rel, overlay.commit)
        if len(entries) != len(mem.entries):
            entries = []  # the file changed since main's commit: no authorship to go by
        listing = "\n".join(
            f"[{e.index}] ({'person' if e.by_person else 'agent'}, added "
            f"{datetime.fromtimestamp(e.added, UTC).date() if e.added else 'now'}, "
            f"{'shown in ' + str(e.sessions_since) + ' sessions' if e.in_prompt else 'past the budget: never shown'}) "
            f"{e.text}" for e in entries) if entries else "\n".join(f"[{i}] {e.text}" for i, e in enumerate(mem.entries, 1))
        ask = ("It is OVER its budget ({size} of {budget} characters): consolidate it. Merge entries that say "
               "the same into one shorter entry, and drop entries a newer entry contradicts."
               if over else "It is within budget: do not merge or drop for space; only report contradictions.")
        try:
            answer = self._chat.ask(
                f"Memory file {rel}, one entry per [id]. {ask.format(size=mem.size, budget=mem.budget)}\n"
                "Answer with JSON only: {\"merge\": [{\"ids\": [1, 4], \"text\": \"the merged entry\", "
                "\"reason\": \"...\"}], \"drop\": [{\"id\": 3, \"reason\": \"...\"}], "
                "\"contradictions\": [{\"ids\": [2, 9], \"reason\": \"...\"}]}\n\n" + listing, fresh=True)
            decision = _json(answer)
        except Exception as exc:
            self.failures.append(f"{rel}: {exc}")
            self.lines.append(f"- {rel}: not curated: the model's answer was refused ({_one_line(exc)})")
            return
        self._apply_memory(overlay, rel, mem, entries, decision, over)

    def _apply_memory(self, overlay: OverlayFiles, rel: str, mem: memory.MemoryFile, info: list[usage.EntryUsage],
                      decision: dict, over: bool) -> None:
        n = len(mem.entries)
        used: set[int] = set()
        replace: dict[int, str] = {}  # entry index -> new text ("" = removed)
        notes: list[str] = []
        added = {e.index: e.added for e in info}
        person = {e.index for e in info if e.by_person}

        def ids_of(item) -> list[int] | None:
            raw = item.get("ids") if isinstance(item, dict) else None
            if not isinstance(raw, list):
                return None
            ids = [i for i in raw if isinstance(i, int) and not isinstance(i, bool)]
            if not ids or len(ids) != len(raw) or any(i < 1 or i > n or i in used for i in ids) or len(set(ids)) != len(ids):
                return None
            return ids

        for item in decision.get("contradictions") or []:
            ids = ids_of(item)
            if not ids or len(ids) < 2:
                continue
            newest = max(ids, key=lambda i: (added.get(i, 0), i))
            for i in ids:
                if i != newest and i in person:
                    self.person_left.append(f"{rel} [{i}] \"{_brief(mem.entries[i - 1].text)}\" is contradicted by "
                                            f"the newer \"{_brief(mem.entries[newest - 1].text)}\" ({_reason(item)})")
                elif i != newest:
                    replace[i] = ""
                    notes.append(f"dropped [{i}] \"{_brief(mem.entries[i - 1].text)}\": contradicted by the newer "
                                 f"\"{_brief(mem.entries[newest - 1].text)}\" ({_reason(item)})")
            used |= set(ids)
            self.counts["contradictions"] += 1
        if over:
            for item in decision.get("merge") or []:
                ids = ids_of(item)
                text = item.get("text") if isinstance(item, dict) else None
                if not ids or not isinstance(text, str) or not text.strip() or "\n\n" in text.strip():
                    continue
                if person & set(ids):
                    self.person_left.append(f"{rel} [{', '.join(map(str, ids))}] could be merged into "
                                            f"\"{_brief(text)}\" ({_reason(item)})")
                    continue
                try:
                    entry = memory.format_entry(text)
                except InputError:
                    continue
                first, *rest = sorted(ids)
                replace[first] = entry
                for i in rest:
                    replace[i] = ""
                used |= set(ids)
                notes.append(f"merged [{', '.join(map(str, ids))}] into \"{_brief(entry)}\" ({_reason(item)})")
            for item in decision.get("drop") or []:
                raw_id = item.get("id") if isinstance(item, dict) else None
                if not isinstance(raw_id, int) or isinstance(raw_id, bool) or not 1 <= raw_id <= n or raw_id in used:
                    continue
                i = raw_id
                if i in person:
                    self.person_left.append(f"{rel} [{i}] \"{_brief(mem.entries[i - 1].text)}\" could be dropped "
                                            f"({_reason(item)})")
                    continue
                replace[i] = ""
                used.add(i)
                notes.append(f"dropped [{i}] \"{_brief(mem.entries[i - 1].text)}\" ({_reason(item)})")
        if not replace:
            return
        text = mem.doc.text
        for i in sorted(replace, reverse=True):  # splice from the end: earlier offsets stay valid
            e = mem.entries[i - 1]
            new = replace[i]
            tail = text[e.start:e.end][len(e.text):]  # the entry's own line ending
            text = text[:e.start] + (new + tail if new else "") + text[e.end:]
        overlay.write(rel, text.encode("utf-8"))
        after = memory.load(overlay, rel, self.vault.config)
        self.counts["consolidated"] += 1 if over else 0
        budget = f"{mem.size} -> {after.size} of {after.budget} characters" + (
            "" if after.size <= after.budget else ", still over budget")
        self.lines.append(f"- {rel}: {budget}; " + "; ".join(notes))

    # -- the words of the commit ------------------------------------------------------------------
    def describe(self, changes: dict[str, bytes | None]) -> Description:
        c = self.counts
        parts = [f"archive {c['archived']} stale skill{'s' if c['archived'] != 1 else ''}" if c["archived"] else "",
                 f"merge {c['merged']} duplicate pair{'s' if c['merged'] != 1 else ''}" if c["merged"] else "",
                 f"consolidate {c['consolidated']} memory file{'s' if c['consolidated'] != 1 else ''}"
                 if c["consolidated"] else "",
                 f"resolve {c['contradictions']} contradiction{'s' if c['contradictions'] != 1 else ''}"
                 if c["contradictions"] else ""]
        summary = "curate: " + (", ".join(p for p in parts if p) or "tidy the library")
        if self.person_left:
            n = len(self.person_left)
            summary += f" ({n} suggestion{'s' if n != 1 else ''} about entries a person wrote: see below)"
        lines = self.lines + [f"- left as a person wrote it (a learned change never rewrites a person's entry "
                              f"unasked; edit it yourself if you agree): {s}" for s in self.person_left]
        policy = self.options.policy or self.vault.config.curate.policy
        return Description(summary, lines, curate_trailers(policy, self.model.name if self.model else None),
                           "library")

    def context(self) -> dict:
        return {}


def curate(vault: Vault, options: CurateOptions | None = None, model: Model | None = None) -> Outcome:
    """One curate run into a curate/... branch; never raises for a failed run (the Outcome says why)."""
    options = options or CurateOptions()
    return pipeline.run(vault, Curator(vault, options, model), options.policy or vault.config.curate.policy)


def restore(vault: Vault, name: str) -> str:
    """Bring an archived skill back into the library, as the person's commit; returns its sha."""
    from ..store.provenance import Act

    skills.check_name(name)
    src, dst = f"{SKILLS_DIR}/{ARCHIVE_DIR}/{name}", f"{SKILLS_DIR}/{name}"
    files = vault.files
    with vault.git.lock.hold():  # the daemon does not commit these moves as a person's edit meanwhile
        archived = files.list(src)
        if not archived:
            raise InputError(f"no archived skill {name!r} (see skills/{ARCHIVE_DIR}/)", src)
        if files.read(f"{src}/{skills.SKILL_FILE}") is None:
            raise InputError(f"skills/{ARCHIVE_DIR}/{name}/ has no SKILL.md: it was edited by hand; "
                             "move its files back yourself", src)
        if files.list(dst):
            raise InputError(f"skills/{name}/ exists: a skill of that name is in the library already", dst)
        for rel in archived:
            files.write(dst + rel[len(src):], files.read_entry(rel) or b"")  # a link moves as a link
            files.delete(rel)
        sha = vault.git.commit_paths([*archived, *(dst + r[len(src):] for r in archived)],
                                     f"skills: restore {name} from the archive", Act.person())
        return sha or vault.git.head()


def _skill_text(answer: str) -> str:
    text = (answer or "").strip()
    fence = re.match(r"^```[a-zA-Z]*\n(.*)\n```$", text, re.S)
    text = fence.group(1) if fence else text
    if not text.startswith("---"):
        raise InputError("the answer is not a SKILL.md (no frontmatter)")
    parse_doc(decode(text.encode(), "SKILL.md"), "SKILL.md", required=True)
    return text.rstrip() + "\n"


def _json(answer: str) -> dict:
    text = (answer or "").strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise InputError("the answer holds no JSON object")
    try:
        value = json.loads(text[start:end + 1])
    except ValueError as exc:
        raise InputError(f"the answer is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise InputError("the answer is not a JSON object")
    return value


def _reason(item: dict) -> str:
    r = item.get("reason") if isinstance(item, dict) else None
    return _one_line(r) if isinstance(r, str) and r.strip() else "no reason given"


def _brief(text: str, limit: int = 60) -> str:
    t = " ".join(text.split()).removeprefix("- ").removeprefix("* ")
    return t if len(t) <= limit else t[: limit - 3] + "..."


def _one_line(value: object, limit: int = 160) -> str:
    t = " ".join(str(value).split())
    return t if len(t) <= limit else t[: limit - 3] + "..."


def stale_count(vault: Vault) -> int:
    """How many skills are stale now (for `status`): model-free, from the cached usage."""
    figures = usage.refresh(vault)
    return len(usage.stale(figures, skills.names(vault.files), vault.config.curate.stale_days, time.time()))
