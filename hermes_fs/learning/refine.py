"""Refine: turn a conversation into memory and skill improvements on a branch of their own.

The six steps of DESIGN section 5: snapshot the transcript on main (commit S); let a reviewer model
edit an in-memory overlay of S with memory and skill tools only; check the result (skills
validator, budgets, frontmatter, secrets, near-duplicate skills); commit it with parent S on
`refine/<stamp>-<slug>` by plumbing; apply the policy (review, auto, additions); report one line.
Any failure leaves main as it was (beyond the snapshot) and no partial branch.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..mind import memory, skills
from ..store import secrets
from ..agent.loop import Agent, AgentConfig
from ..store.docs import decode, parse_doc
from ..errors import ConflictError, HermesError, InputError
from ..store.git import format_message
from ..agent.model import LiteLLMModel, Model, ModelSettings
from ..store.overlay import OverlayFiles
from ..agent.prompt import select_skills
from ..mind.sessions import latest_session, parse_messages, session_path
from ..agent.tools import REVIEW_TOOLS, ToolBox
from ..store.vault import Vault

TRANSCRIPT_LIMIT = 60_000  # characters of conversation shown to the reviewer (the newest part)
RESULT_LIMIT = 600  # characters of each tool result shown

REVIEWER_PROMPT = """You review one conversation between a user and their assistant, hermes-fs, and decide what the \
assistant should remember. Your edits go to a branch that the user reviews like a pull request, so \
every change must be worth their time. You can only use the memory and skill tools; you do not talk \
to the user.

What to capture, in order of value:
1. Corrections and stated preferences of the user (how they like answers, tools, style, constraints) \
-> memory/USER.md. A correction the user repeated is stronger than a passing remark.
2. A procedure that worked in this conversation and will recur -> a skill. Prefer patching an \
existing skill (skill_view it first, then skill_manage patch) over creating a new one; create only \
when no existing skill covers the topic. A new skill needs the full SKILL.md: frontmatter with \
`name` (the folder name: lowercase letters, digits, single hyphens) and a `description` that says \
what it does and when to use it, then: when to use, numbered steps, pitfalls, how to verify.
3. Durable lessons about the environment or the work -> memory/MEMORY.md, or \
memory/projects/<slug>.md for one project's structure, decisions and past fixes.

How to write:
- Lessons, not logs: "Deploys need `fly deploy --strategy rolling`", not "Today we deployed".
- Use absolute dates (today is {today}); never "yesterday" or "last week".
- Never turn a transient failure (a timeout, a flaky network, a typo, a service briefly down) into \
a rule.
- One fact per memory entry; short; no secrets, keys or tokens ever.
- Stay within each file's budget. A file marked OVER BUDGET must be consolidated: replace several \
related entries with one shorter entry, remove stale ones.
- Edit entries with the memory tool: old_text is a unique substring of the entry to replace/remove.
- Do not repeat what memory or skills already say.

The focus, when one is given, comes first: capture what it asks for, above these general rules.

When you are done, answer with exactly this shape and nothing else:
Summary: <one line saying what you changed>
- <file>: <the change> (because <the reason, pointing at the conversation>)
- ...
If nothing in the conversation is worth keeping, make no edits and answer exactly:
Summary: nothing to change"""


class RefineError(HermesError):
    """A refine could not produce a valid change."""


@dataclass
class RefineOptions:
    session: str | None = None  # a session id; None or "latest" = the newest
    focus: str | None = None
    policy: str | None = None  # overrides refine.policy
    max_steps: int = 30
    check_rounds: int = 2  # times the reviewer is sent back to fix what the checks refused


@dataclass
class RefineResult:
    status: str  # merged | pending | nothing | conflict | failed
    branch: str | None = None
    files: list[str] = field(default_factory=list)
    summary: str = ""
    reason: str = ""
    session: str | None = None
    snapshot: str | None = None
    conflicts: list[str] = field(default_factory=list)
    kind: str = "refine"  # refine | learn

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    def line(self) -> str:
        files = ", ".join(self.files) if self.files else "no files"
        if self.status == "nothing":
            return f"{self.kind}: nothing to change ({self.reason or 'the reviewer found nothing worth keeping'})"
        if self.status == "failed":
            return f"{self.kind} failed: {self.reason}"
        return f"{self.kind}: {self.branch} [{files}] {self.status}: {self.reason}"


# -- the steps ---------------------------------------------------------------------------------
def resolve_session(vault: Vault, session: str | None) -> str:
    if session and session != "latest":
        session_path(session)  # validates the id
        return session
    found = latest_session(vault.root)
    if not found:
        raise InputError("no sessions to review yet: chat first (hermes-fs chat or run)")
    return found


def snapshot(vault: Vault, session_id: str) -> str:
    """Step 1: commit the transcript (only it) on main; that commit is S."""
    rel = session_path(session_id)
    store = vault.git
    with store.lock.hold():
        store.commit_paths([rel], f"session: snapshot {session_id}", {"Hermes-Session": session_id})
        s = store.head()
    if store.read_file(s, rel) is None:
        raise InputError(f"no session {session_id}", rel)
    return s


def refine(vault: Vault, options: RefineOptions | None = None, model: Model | None = None) -> RefineResult:
    """Run all six steps; never raises for a failed review (the result says what went wrong)."""
    options = options or RefineOptions()
    cfg = vault.config
    result = RefineResult("failed", session=None)
    branch = None
    try:
        sid = resolve_session(vault, options.session)
        result.session = sid
        s = snapshot(vault, sid)
        result.snapshot = s
        model = model or LiteLLMModel(ModelSettings.from_config(cfg, "refine"))
        overlay = OverlayFiles(vault.git, s)
        answer = review(vault, overlay, s, sid, options, model)
        changes = overlay.effective_changes()
        if not changes:
            return RefineResult("nothing", session=sid, snapshot=s, reason="the reviewer found nothing worth keeping")
        summary, lines = parse_report(answer, changes)
        trailers = {"Refine-Session": sid, "Refine-Snapshot": s, "Refine-Focus": options.focus or "",
                    "Refine-Model": model.name}
        branch = unique_branch(vault, "refine", options.focus or summary)
        vault.git.commit_overlay(s, branch, changes, format_message(summary, lines, trailers), author=cfg.git.author)
        result = apply_policy(vault, branch, summary, options.policy or cfg.refine.policy)
        result.session, result.snapshot = sid, s
    except Exception as exc:  # any failure: no partial branch, a clear report
        result = failure(vault, branch, exc, "refine", session=result.session, snapshot=result.snapshot)
    notify_result(vault, result)
    return result


def failure(vault: Vault, branch: str | None, exc: Exception, kind: str, **fields) -> RefineResult:
    """The report of a failed refine or learn, after removing the branch it may have left."""
    if branch and vault.git.rev(f"refs/heads/{branch}"):
        vault.git.delete_branch(branch)
    reason = str(exc) if isinstance(exc, HermesError) else f"{type(exc).__name__}: {exc}"
    return RefineResult("failed", kind=kind, reason=reason, **fields)


def review(vault: Vault, overlay: OverlayFiles, s: str, sid: str, options: RefineOptions, model: Model) -> str:
    """Step 2 and 3: the reviewer edits the overlay; the checks send it back to fix problems."""
    cfg = vault.config
    existing = skills_at(overlay)
    tools = ToolBox(files=overlay, config=cfg, enabled=REVIEW_TOOLS, skill_guard=duplicate_guard(existing))
    agent = Agent(model, tools, AgentConfig(options.max_steps))
    today = datetime.now(timezone.utc).date().isoformat()
    messages = [{"role": "system", "content": REVIEWER_PROMPT.format(today=today)},
                {"role": "user", "content": brief(vault, overlay, s, sid, options.focus, existing)}]
    turn = agent.run(messages)
    for attempt in range(options.check_rounds + 1):
        if turn.stopped:
            raise RefineError(f"the reviewer did not finish within {options.max_steps} steps")
        problems = check(overlay, cfg)
        if not problems:
            return turn.answer
        if attempt == options.check_rounds:
            break
        messages.append({"role": "user", "content": "The checks refused your changes:\n" + "\n".join(
            f"- {p}" for p in problems) + "\nFix each problem (or undo that change), then answer again in the same shape."})
        turn = agent.run(messages)
    raise RefineError("checks still failing after retries: " + "; ".join(check(overlay, cfg)))


def check(overlay: OverlayFiles, cfg) -> list[str]:
    """Step 3: every changed file must be valid, within budget, parseable and secret-free."""
    problems = []
    for path, data in sorted(overlay.effective_changes().items()):
        top = path.split("/", 1)[0]
        if top not in ("memory", "skills"):
            problems.append(f"{path}: a review may only change memory/ and skills/")
            continue
        if data is None:
            continue
        try:
            text = decode(data, path)
        except InputError as exc:
            problems.append(str(exc))
            continue
        problems += [f"{f.path}:{f.line}: contains a secret ({f.kind}); remove it" for f in secrets.scan(path, data)]
        parts = path.split("/")
        if top == "skills":
            if len(parts) == 3 and parts[2] == skills.SKILL_FILE:
                problems += [f"{path}: {e}" for e in skills.validate_text(parts[1], text)]
            elif overlay.read(f"skills/{parts[1]}/{skills.SKILL_FILE}") is None:
                problems.append(f"{path}: skill {parts[1]} has no SKILL.md")
            continue
        try:
            m = memory.load(overlay, path, cfg)
        except InputError as exc:
            problems.append(str(exc))
            continue
        old = overlay.store.read_file(overlay.commit, path)
        old_size = len(parse_doc(decode(old, path), path).body) if old else 0
        if m.size > m.budget and m.size > old_size:
            problems.append(f"{path}: over budget ({m.size}/{m.budget} characters); consolidate entries")
    return problems


def skills_at(files) -> dict[str, str]:
    """name -> description of the skills in a FileStore (the snapshot, for the reviewer)."""
    out = {}
    for name in skills.names(files):
        try:
            out[name] = skills.read(files, name).description
        except InputError:
            out[name] = ""
    return out


_WORD = re.compile(r"[a-z0-9]{3,}")
_STOP = set("the and for with use when that this from into your user users what how".split())


def _tokens(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def similar_skill(name: str, description: str, existing: dict[str, str]) -> str | None:
    """The existing skill a new one nearly duplicates: same name words, or mostly the same words."""
    new_name, new_all = _tokens(name.replace("-", " ")), _tokens(name.replace("-", " ") + " " + description)
    for other, desc in existing.items():
        if other == name:
            return other
        other_name, other_all = _tokens(other.replace("-", " ")), _tokens(other.replace("-", " ") + " " + desc)
        if new_name and new_name == other_name:
            return other
        if new_all and other_all and len(new_all & other_all) / len(new_all | other_all) >= 0.5:
            return other
    return None


def duplicate_guard(existing: dict[str, str]):
    def guard(name: str, content: str) -> None:
        try:
            desc = str(parse_doc(content, f"skills/{name}/SKILL.md", required=True).meta.get("description") or "")
        except InputError:
            return  # the validator will say what is wrong
        twin = similar_skill(name, desc, existing)
        if twin:
            raise InputError(f"skill {name!r} nearly duplicates the existing skill {twin!r}: "
                             f"patch {twin} instead (skill_view it, then skill_manage patch)")
    return guard


def brief(vault: Vault, overlay: OverlayFiles, s: str, sid: str, focus: str | None, existing: dict[str, str]) -> str:
    """What the reviewer reads: focus, memory and skills as of S, and the conversation."""
    cfg = vault.config
    parts = [f"Focus: {focus}" if focus else "Focus: none given; review the whole conversation."]
    parts.append("## Memory files (as of the snapshot)")
    project_files = []
    for name in memory.list_memory(overlay):
        if name.startswith("projects/"):
            project_files.append(f"memory/{name}")
            continue
        m = memory.load(overlay, name, cfg)
        flag = " OVER BUDGET: consolidate" if m.over_budget else ""
        parts.append(f"### {m.path} ({m.size}/{m.budget} characters){flag}\n{m.doc.body.strip()}")
    if project_files:
        parts.append("Project memory files (read_file to see one): " + ", ".join(project_files))
    transcript = render_transcript(vault.git.read_file(s, session_path(sid)) or b"", sid)
    query = " ".join(re.findall(r"^USER: (.*)$", transcript, re.M))[:2000]
    ranked = [n for n in existing if query and _tokens(n + " " + existing[n]) & _tokens(query)]
    index = select_skills(existing, ranked, cfg.skills.prompt_budget_chars)
    parts.append("## Skills (skill_view to read one)\n" + (index.text or "(none yet)"))
    parts.append(f"## The conversation (session {sid})\n{transcript}")
    return "\n\n".join(parts)


def render_transcript(data: bytes, sid: str) -> str:
    rel = session_path(sid)
    doc = parse_doc(decode(data, rel), rel, required=True)
    lines = []
    for m in parse_messages(doc.body.lstrip("\n"), rel):
        if m["role"] == "user":
            lines.append(f"USER: {m['content']}")
        elif m["role"] == "assistant":
            if m.get("content"):
                lines.append(f"ASSISTANT: {m['content']}")
            for c in m.get("tool_calls") or []:
                lines.append(f"TOOL CALL {c['function']['name']}: {c['function']['arguments'][:RESULT_LIMIT]}")
        elif m["role"] == "tool":
            content = m["content"]
            cut = f" [... {len(content) - RESULT_LIMIT} more characters]" if len(content) > RESULT_LIMIT else ""
            lines.append(f"TOOL RESULT {m.get('name')}: {content[:RESULT_LIMIT]}{cut}")
        elif m["role"] == "note":
            lines.append(f"(note: {m['content']})")
    text = "\n".join(lines)
    return text if len(text) <= TRANSCRIPT_LIMIT else "[... earlier turns omitted ...]\n" + text[-TRANSCRIPT_LIMIT:]


def parse_report(answer: str, changes: dict[str, bytes | None]) -> tuple[str, list[str]]:
    """The reviewer's `Summary:` line and change lines; what is missing is filled from the changes."""
    summary, lines = "", []
    for line in (answer or "").splitlines():
        stripped = line.strip()
        if stripped.lower().startswith("summary:") and not summary:
            summary = stripped.split(":", 1)[1].strip()
        elif stripped.startswith(("- ", "* ")):
            lines.append("- " + " ".join(stripped[2:].split()))
    if not summary or summary.lower() == "nothing to change":
        summary = "update " + ", ".join(sorted(changes))
    summary = " ".join(summary.split())[:120]
    if not lines:
        lines = [f"- {p}: {'removed' if d is None else 'updated'} (no reason given)" for p, d in sorted(changes.items())]
    return summary, lines


def slugify(text: str, limit: int = 40) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", (text or "").lower()).strip("-")
    return slug[:limit].rstrip("-") or "change"


def unique_branch(vault: Vault, kind: str, text: str) -> str:
    """`<kind>/<stamp>-<slug>`, suffixed when a pending, rejected or merged change has that name.
    (Slugs hold only [a-z0-9-], so the name is safe inside the grep pattern.)"""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = f"{kind}/{stamp}-{slugify(text)}"
    name, n = base, 1
    while (vault.git.rev(f"refs/heads/{name}") or vault.git.rev(f"refs/hermes/rejected/{name}")
           or vault.git.log(grep=f"^merge {name}: ", limit=1)):  # a merged branch is gone but its name is taken
        n += 1
        name = f"{base}-{n}"
    return name


def apply_policy(vault: Vault, branch: str, summary: str, policy: str) -> RefineResult:
    """Step 5: leave for review, merge now, or merge only pure additions."""
    store = vault.git
    tip = store.rev(f"refs/heads/{branch}")
    parent = store.commit_info(tip).parents[0]
    stat = store.numstat(parent, tip)
    files = [p for _a, _d, p in stat]
    result = RefineResult("pending", branch, files, summary, kind=branch.split("/", 1)[0])
    if policy == "review":
        result.reason = "policy review: waiting for `hermes-fs review merge`"
        return result
    if policy == "additions" and any(deleted for _a, deleted, _p in stat):
        result.reason = "policy additions: it edits or removes lines, so it waits for review"
        return result
    try:
        store.merge(branch, f"merge {branch}: {summary}", author=vault.config.git.author)
    except ConflictError as exc:
        result.status, result.conflicts = "conflict", exc.files
        result.reason = f"conflicts with edits in {', '.join(exc.files)}; left for review"
        return result
    result.status, result.reason = "merged", f"policy {policy}"
    return result


def notify_result(vault: Vault, result: RefineResult) -> None:
    """refine_pending / refine_failed events; a delivery problem never fails the refine."""
    event = {"pending": "refine_pending", "conflict": "refine_pending", "failed": "refine_failed"}.get(result.status)  # learn too
    if not event or not vault.config.notify.targets:
        return
    from ..store.notify import Notifier

    try:
        Notifier(vault.config, vault.state_dir / "secrets.env").event(event, f"hermes-fs: {event.replace('_', ' ')}", result.line())
    except Exception:
        pass


def start_background(vault: Vault, options: RefineOptions) -> tuple[int, Path]:
    """Run `hermes-fs refine --wait` as a detached process; returns its pid and log file."""
    logs = vault.state_dir / "logs"
    logs.mkdir(exist_ok=True)
    log = logs / f"refine-{datetime.now(timezone.utc):%Y%m%d-%H%M%S-%f}.log"
    args = [sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), "refine", "--wait"]
    if options.session:
        args += ["--session", options.session]
    if options.policy:
        args += ["--policy", options.policy]
    if options.focus:
        args.append(options.focus)
    with open(log, "w") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return proc.pid, log
