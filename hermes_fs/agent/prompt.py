"""The system prompt: a short identity, USER.md, MEMORY.md, the current project's memory and the
skills index. The index fits `skills.prompt_budget_chars`; past that, the skills most relevant to
the conversation are chosen by full-text search and the prompt says how to find the rest."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from ..errors import InputError
from ..mind import embeddings, memory, skills
from ..mind.embeddings import MODEL, STATIC, fuse
from ..mind.search import SearchIndex
from ..store import secrets
from ..store.config import Config
from ..store.docs import decode, parse_doc
from ..store.files import FileStore
from ..store.vault import Vault

IDENTITY = """You are hermes-fs, a persistent assistant. Your memory and skills are Markdown files in a git \
vault that the user can read and edit. Save durable facts about the user with the `memory` tool \
(USER.md) and your own lessons in MEMORY.md: short entries, absolute dates, lessons not logs. \
Before a task a skill covers, read it with `skill_view`. Never put secrets in files."""


# Past the budget (chosen on bench/routing_dev.yaml): this share of the skills index's budget for
# `- name: description` lines, each description cut to its first sentence and at most SHORT_CHARS;
# the rest of the budget names skills.
DESCRIBED_SHARE = 0.55
SHORT_CHARS = 50
log = logging.getLogger(__name__)
LEXICAL_TOP = 5  # with embeddings on: full-text hits past these are mostly incidental words (bench/routing_heldout.py)


@dataclass
class SkillsIndex:
    text: str
    shown: list[str]  # named in the index, with or without a description
    total: int
    described: list[str] | None = None  # shown with a description (None: all of `shown`)


def skills_index(vault: Vault, query: str, budget: int, semantic: str | bool | None = None,
                 related: bool = False) -> SkillsIndex:
    """All skills if they fit the budget; otherwise the most relevant first, then a pointer to search.
    Relevance is full-text (BM25), fused with meaning as `skills.embeddings` says (`meanings`), or
    as `semantic` says (False, "static", "model" or "both": the bench's ways).
    `related`: full-text fused with a search for words mined from the skills (SearchIndex.related);
    measured by bench/routing_heldout.py, off by default (it named more needed skills on the development
    set but pushed exact full-text hits down)."""
    names = skills.names(vault.files)
    index = SearchIndex(vault.root)
    try:
        index.refresh("skills")
        described = {path.split("/")[1]: desc for path, desc in
                     index.db.execute("SELECT path, description FROM fts WHERE kind='skills'")}
        entries = {n: described.get(n, "") for n in names}
        if fits(entries, budget) or not query:
            return select_skills(entries, [], budget)
        ranked = [h.path.split("/")[1] for h in index.search("skills", query, limit=200)]
        if related:
            ranked = fuse(ranked, ranked, [h.path.split("/")[1] for h in index.search_related(query, limit=200)])
        rankings = []
        for kind in meanings(vault.config.skills.embeddings if semantic is None else semantic):
            by_meaning, missing = _by_meaning(index, query, kind)
            if missing and kind == STATIC and by_meaning:
                log.info(f"skills index: {missing} of {len(names)} skills had no static vectors: encoded now")
            elif missing:  # a cold or stale cache is filled in the background: never waited for here
                log.info(f"skills index: {missing} of {len(names)} skills have no {kind} vectors yet (being built): "
                         + ("ranked without them" if not by_meaning else "those are ranked by the other rankings only"))
            if by_meaning:
                rankings.append([p.split("/")[1] for p in by_meaning])
        if rankings:  # full-text's few best hits, fused with the rankings by meaning
            ranked = fuse(ranked[:LEXICAL_TOP], *rankings)
    finally:
        index.close()
    return select_skills(entries, ranked, budget)


def meanings(setting: str | bool) -> list[str]:
    """The kinds of vectors a turn ranks by. `auto` (the default): static vectors wherever the
    extra is installed (no transformer runs), plus the model's where it is already loaded (the
    daemon's model worker; an unloaded one is loaded in the background for the next turn); `true`:
    both, the model loaded wherever it is not; the bench names a way ("static", "model", "both")."""
    if setting in (STATIC, MODEL):
        return [str(setting)]
    if setting == "both":
        return [STATIC, MODEL]
    kind = embeddings.mode(setting)
    if kind == "model":
        return [STATIC, MODEL]
    if kind != "auto" or not embeddings.available():
        return []
    if embeddings.model_loaded():
        return [STATIC, MODEL]
    if embeddings.has_encoder():  # the daemon: loaded in its worker, off this turn's path
        embeddings.warm_in_background()
    return [STATIC]


def _by_meaning(index: SearchIndex, query: str, kind: str) -> tuple[list[str], int]:
    """One ranking by meaning; none when its table or model is missing (logged: full-text goes on)."""
    from ..mind.static_vectors import TableMissing

    try:
        return index.semantic(query, limit=200, kind=kind)
    except (TableMissing, embeddings.EmbeddingsUnavailable) as exc:
        log.info(f"skills index: no {kind} ranking ({exc})")
        return [], 0


def fits(entries: dict[str, str], budget: int) -> bool:
    return sum(len(f"- {n}: {' '.join(d.split())}") + 1 for n, d in entries.items()) - 1 <= budget


def select_skills(entries: dict[str, str], ranked: list[str], budget: int, described_share: float = DESCRIBED_SHARE,
                  short_chars: int = SHORT_CHARS) -> SkillsIndex:
    """Lines `- name: description` within `budget` characters, most relevant (`ranked`) first. Past
    `described_share` of the budget the next relevant skills are named without their description
    (a name like `docker-management` says enough to open it), so the index reaches several times
    more skills than it describes (bench/routing_heldout.py). Past the budget a description is cut
    to its first sentence, at most `short_chars` characters ("- flash-attention: Optimizes
    transformer attention with…"), so more skills are described; skill_view has the rest."""
    names = sorted(entries)
    lines = {n: f"- {n}: {' '.join(entries[n].split())}" for n in names}
    full_text = "\n".join(lines[n] for n in names)
    if len(full_text) <= budget:
        return SkillsIndex(full_text, names, len(names))
    order = [n for n in ranked if n in lines] + [n for n in names if n not in ranked]
    described: list[str] = []
    text_lines: list[str] = []
    used, skipped = 0, False
    for n in order:
        line = f"- {n}: {first_sentence(entries[n], short_chars)}"
        cost = len(line) + 1
        if used + cost > budget * described_share:
            if n in ranked:
                skipped = True
                continue  # a long description: try the next relevant one
            break
        if skipped and n not in ranked:
            break  # a relevant skill left undescribed is named before any other is described
        described.append(n)
        text_lines.append(line)
        used += cost
    text = "\n".join(text_lines)
    named: list[str] = []
    also = "\nAlso (skill_view to read one): "
    done = set(described)
    rest = [n for n in order if n not in done]
    used += len(also) - 1
    for n in rest:
        cost = len(n) + 2
        if used + cost > budget:
            break
        named.append(n)
        used += cost
    if named:
        text += also + ", ".join(named)
    shown = described + named
    text += _MORE.format(len(names) - len(shown))
    return SkillsIndex(text, shown, len(names), described)


def first_sentence(description: str, limit: int) -> str:
    """The description's first sentence, cut at a word to at most `limit` characters (with "…")."""
    text = " ".join(description.split())
    end = re.search(r"[.!?](\s|$)", text)
    if end:
        text = text[: end.start() + 1]
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"


_MORE = "\n({} more skills not listed: call skill_search with keywords to find them.)"


PRIVATE_MEMORY = frozenset({"USER.md"})  # about the owner: never in a customer's turn (prompt or memory_read)


def system_prompt(vault: Vault, query: str = "", project: str | None = None, extra_skills: list[str] | tuple[str, ...] = (),
                  customer: bool = False) -> str:
    """`customer`: a stranger's support turn: what memory says of the owner (USER.md) is left out."""
    cfg = vault.config
    parts = [soul(vault) or IDENTITY]
    for name, title in (("USER.md", "About the user (memory/USER.md)"), ("MEMORY.md", "Your notes (memory/MEMORY.md)")):
        if customer and name in PRIVATE_MEMORY:
            continue
        body = _memory_body(vault, name)
        if body:
            parts.append(f"# {title}\n{body}")
    if project:
        body = _memory_body(vault, f"projects/{project}.md")
        if body:
            parts.append(f"# Current project: {project} (memory/projects/{project}.md)\n{body}")
    idx = skills_index(vault, query, cfg.skills.prompt_budget_chars)
    if idx.total:
        parts.append(f"# Skills (read one with skill_view before using it)\n{idx.text}")
    for name in extra_skills:
        parts.append(f"# Skill loaded for this task: {name}\n{skills.view(vault.files, name)}")
    return "\n\n".join(parts)


def tree_prompt(files: FileStore, config: Config) -> str:
    """The system prompt as a tree of the vault (a commit, a pending change) would give it: the
    same identity, memory and skills index, read from `files` instead of the working folder (a
    person's checks ask the agent through it, learning/checks.py)."""
    parts = [_soul(files) or IDENTITY]
    for name, title in (("USER.md", "About the user (memory/USER.md)"), ("MEMORY.md", "Your notes (memory/MEMORY.md)")):
        body = _memory_text(files, config, name)
        if body:
            parts.append(f"# {title}\n{body}")
    described = {}
    for name in skills.names(files):
        try:
            described[name] = skills.read(files, name).description
        except InputError:
            described[name] = ""
    if described:
        index = select_skills(described, [], config.skills.prompt_budget_chars)
        parts.append(f"# Skills (read one with skill_view before using it)\n{index.text}")
    return "\n\n".join(parts)


def soul(vault: Vault) -> str:
    return _soul(vault.files)


def _soul(files: FileStore) -> str:
    """memory/SOUL.md (e.g. imported from Hermes Agent): the vault's own identity, if it has one."""
    try:
        data = files.read("memory/SOUL.md")
        return parse_doc(decode(data, "memory/SOUL.md"), "memory/SOUL.md").body.strip()[:8000] if data else ""
    except InputError:
        return ""


SECRET_SCAN_MARGIN = 4096  # characters past the budget also scanned: a key cut by the budget is still caught


def _memory_body(vault: Vault, name: str) -> str:
    return _memory_text(vault.files, vault.config, name)


def _memory_text(files: FileStore, config: Config, name: str) -> str:
    """The part of a memory file that goes into the prompt. Only that part (and a margin) is scanned
    for secrets: text past the budget never reaches a model, and scanning it made every turn pay for
    the whole file."""
    try:
        view = memory.prompt_view(files, name, config)
    except InputError:
        return ""
    body, budget = view.body, view.budget
    if secrets.scan_text(view.path, body[: budget + SECRET_SCAN_MARGIN]):  # a person's uncommitted paste: never sent
        return f"({view.path} holds a secret and is left out until it is removed from the file)"
    if len(body) > budget:  # the budget bounds the prompt, whatever the file says
        return body[:budget] + f"\n[... {len(body) - budget} more characters over budget; refine will consolidate]"
    return body


def current_project(vault: Vault, workspace) -> str | None:
    """The project whose memory file is named after the workspace folder, if there is one."""
    if workspace is None:
        return None
    slug = workspace.name.lower()
    return slug if (vault.root / "memory" / "projects" / f"{slug}.md").is_file() else None
