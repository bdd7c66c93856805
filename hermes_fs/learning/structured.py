"""Structured mode: the reviewer answers one JSON document under a JSON schema instead of calling tools.

Small local models rarely call tools unprompted, but under a `response_format` json_schema their
JSON is valid. The document lists memory edits and skill drafts or patches, each with its reason;
every entry is applied to the overlay as the very tool call it stands for (`ToolBox.call`), so
argument checks, the duplicate-skill guard and the restrictions of learn `--update` are the same,
and the pipeline then checks, commits and reviews it exactly as it does tool edits. A reply that
is not such a document is sent back once per round with the reason; after that the change fails
with that reason. Nothing in the document is trusted beyond what the tools allow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..agent.model import Model, Usage
from ..agent.tools import ToolBox
from ..store.config import ReviewMode
from ..store.overlay import OverlayFiles
from ..store.secrets import redact
from .pipeline import CHECK_ROUNDS, LearningError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryEdit(_Strict):
    """One `memory` tool call. The reason comes before the entry: written first (a grammar keeps the
    order), the words of the conversation it quotes lead a small model to the lesson they state."""

    action: Literal["add", "replace", "remove"]
    file: str = Field(description="USER.md, MEMORY.md or projects/<slug>.md")
    reason: str = Field(description="why, pointing at the conversation")
    text: str = Field(description="the entry to add, or the new text of the replaced entry; empty for remove")
    old_text: str = Field(description="replace/remove: a unique part of the existing entry; empty for add")


class SkillEdit(_Strict):
    """One `skill_manage` call (create, patch, write_file)."""

    action: Literal["create", "patch", "write_file"]
    name: str = Field(description="the skill's folder name: lowercase letters, digits, single hyphens")
    content: str = Field(description="create: the full SKILL.md with frontmatter; write_file: the file's text")
    old_text: str = Field(description="patch: the exact text to replace")
    new_text: str = Field(description="patch: the text that replaces it")
    file: str = Field(description="patch or write_file: a file inside the skill, e.g. references/x.md; empty = SKILL.md")
    reason: str = Field(description="why, pointing at the conversation or the document")


class ReviewSkillEdit(_Strict):
    """Refine's skill entry: create or patch a SKILL.md (no support files: fewer fields for a small
    model to fill with noise; learn's `SkillEdit` keeps them)."""

    action: Literal["create", "patch"]
    name: str = Field(description="the skill's folder name: lowercase letters, digits, single hyphens")
    reason: str = Field(description="why, pointing at the conversation")
    content: str = Field(description="create: the full SKILL.md with frontmatter")
    old_text: str = Field(description="patch: the exact text to replace")
    new_text: str = Field(description="patch: the text that replaces it")


class ReviewDocument(_Strict):
    """What refine's reviewer answers in structured mode. The lessons come first and the summary
    last: under a grammar the fields are written in this order, and a small model that starts with
    a summary of "nothing to change" keeps to it (measured: bench/learning_eval.py)."""

    memory: list[MemoryEdit] = Field(max_length=12)
    skills: list[ReviewSkillEdit] = Field(max_length=4)
    summary: str = Field(description="one line saying what you changed, or 'nothing to change'")


class SkillDocument(_Strict):
    """What learn's drafter answers in structured mode (skills only, as with its tools)."""

    skills: list[SkillEdit] = Field(max_length=4)
    summary: str = Field(description="one line saying what you wrote")


Document = ReviewDocument | SkillDocument


def json_schema(document: type[BaseModel]) -> dict:
    """The document's JSON schema with every `$ref` inlined (small servers' grammars need no $defs)."""
    schema = document.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(defs[node["$ref"].rsplit("/", 1)[1]])
            return {k: inline(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return inline(schema)


def response_format(document: type[BaseModel]) -> dict:
    return {"type": "json_schema",
            "json_schema": {"name": document.__name__, "schema": json_schema(document), "strict": True}}


class DocumentError(ValueError):
    """The model's answer is not a document of the schema; the message says why, briefly."""


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n```\s*$", re.S)


def parse_document(text: str | None, document: type[BaseModel]) -> BaseModel:
    """The document in a model's answer (a Markdown fence around it is tolerated), or DocumentError."""
    raw = (text or "").strip()
    fenced = _FENCE.match(raw)
    if fenced:
        raw = fenced.group(1).strip()
    if not raw:
        raise DocumentError("the answer is empty")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"not valid JSON ({exc.msg} at position {exc.pos})") from None
    try:
        return document.model_validate(value)
    except ValidationError as exc:
        errs = exc.errors()
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'document'}: {e['msg']}" for e in errs[:3])
        more = f" (and {len(errs) - 3} more)" if len(errs) > 3 else ""
        raise DocumentError(f"not a document of the schema: {where}{more}") from None


@dataclass
class Applied:
    """What became of one entry of a document: the tool call's result."""

    path: str
    what: str
    reason: str
    result: str

    @property
    def ok(self) -> bool:
        return self.result.startswith("ok")

    @property
    def skipped(self) -> bool:
        return self.result.startswith("skipped:")


def tool_calls(doc: BaseModel) -> list[tuple[str, dict, str, str, str]]:
    """(tool, arguments, path, what, reason) for each entry, as the tool call it stands for."""
    calls = []
    for m in getattr(doc, "memory", []):
        args = {"action": m.action, "file": m.file}
        if m.action != "remove":
            args["text"] = m.text
        if m.action != "add":
            args["old_text"] = m.old_text
        name = m.file.removeprefix("memory/")
        what = f"replace {_quote(m.old_text)} with {_quote(m.text)}" if m.action == "replace" else \
            f"{m.action} {_quote(m.text or m.old_text)}"
        calls.append(("memory", args, f"memory/{name}", what, m.reason))
    for s in doc.skills:  # type: ignore[attr-defined]
        name = _skill_name(s.name)
        args = {"action": s.action, "name": name}
        file = getattr(s, "file", "")
        inside = "" if _names_skill_md(file, name) else file  # its own SKILL.md, however spelled: ""
        if s.action == "create":
            args["content"] = s.content
        elif s.action == "patch":
            args.update(old_text=s.old_text, new_text=s.new_text, **({"file": inside} if inside else {}))
        else:
            args.update(file=file, content=s.content)
        shown = inside if s.action != "create" and inside else "SKILL.md"
        calls.append(("skill_manage", args, f"skills/{name}/{shown}", s.action, s.reason))
    return calls


def _skill_name(name: str) -> str:
    """A skill named by its path (`skills/x`, `skills/x/SKILL.md`) means `x`; anything else is left
    for skill_manage to accept or refuse."""
    m = re.fullmatch(r"(?:skills/)?([^/]+)(?:/SKILL\.md)?", name.strip().strip("/"))
    return m.group(1) if m else name


def _names_skill_md(file: str, name: str) -> bool:
    return file.strip().strip("/") in ("SKILL.md", f"{name}/SKILL.md", f"skills/{name}/SKILL.md")


def _quote(text: str, limit: int = 80) -> str:
    one = " ".join(redact(text, context=True)[0].split())  # shown to the model again and in the commit message
    return '"' + (one if len(one) <= limit else one[: limit - 3] + "...") + '"'


NO_REASON = ("error: this entry gives no reason; start its reason with the user's words that show it "
             "(every change carries its reason, or it is not made)")


# (tool, arguments, reason) -> "skipped: why", or None to apply (it may route the entry: set arguments["file"])
Screen = Callable[[str, dict, str], "str | None"]


def apply(doc: BaseModel, tools: ToolBox, screen: Screen | None = None) -> list[Applied]:
    """Each entry through the same tool the tools mode would call; refusals come back as results.
    An entry without a reason is refused before its tool is called; one the `screen` skips (code's
    judgement: not grounded in what the person said, already in memory) is left out, not sent back."""
    out = []
    for tool, args, path, what, reason in tool_calls(doc):
        skipped = screen(tool, args, reason) if screen and reason.strip() else None
        if tool == "memory" and path != f"memory/{str(args.get('file', '')).removeprefix('memory/')}":
            path = f"memory/{str(args['file']).removeprefix('memory/')}"  # the screen routed it
        result = NO_REASON if not reason.strip() else skipped or tools.call(tool, json.dumps(args))
        out.append(Applied(path, what, reason, result))
    return out


def report(doc: BaseModel, applied: list[Applied]) -> str:
    """The answer in the reviewer's usual shape (`Summary:` and a line per change), from what applied."""
    done = [a for a in applied if a.ok]
    if not done:
        return "Summary: nothing to change"
    summary = " ".join(str(getattr(doc, "summary", "")).split())
    if not summary or summary.lower().rstrip(".") == "nothing to change":  # named from what was learned
        first = done[0]
        summary = ("learn: " + first.what.split(" ", 1)[-1].strip('"') if first.path.startswith("memory/")
                   else f"learn: {first.what} skill {first.path.split('/')[1]}")
    lines = [f"- {a.path}: {a.what} (because {' '.join(a.reason.split())})" for a in done]
    return "\n".join([f"Summary: {summary}", *lines])


FIX_HINT = ("Answer with the whole corrected JSON document: it replaces your previous one "
            "(leave out a change you cannot fix).")


@dataclass
class StructuredTask:
    """The pipeline's model conversation in structured mode (the same `ask` as ModelTask).

    Each ask gets one document and applies it to the overlay. A follow-up ask in the same
    conversation (the checks refused something) takes back the previous document's changes and
    applies the corrected one instead. An invalid answer or refused entries are sent back, up to
    `rounds` times; an answer still invalid then is a LearningError naming why."""

    model: Model
    tools: ToolBox
    overlay: OverlayFiles
    system: str
    document: type[BaseModel] = ReviewDocument
    rounds: int = CHECK_ROUNDS
    fix_hint: str = FIX_HINT
    messages: list[dict] = field(default_factory=list)
    answer: str = ""
    usage: Usage = field(default_factory=Usage)
    applied: list[Applied] = field(default_factory=list)
    invalid_answers: int = 0  # answers that were not a document of the schema (for benchmarks)
    screen: Screen | None = None  # code's judgement of each entry before it is applied (refine's)
    _before: dict[str, bytes | None] = field(default_factory=dict)

    def ask(self, text: str, fresh: bool = False) -> str:
        fix = bool(self.messages) and not fresh
        if not self.messages or fresh:
            self.messages = [{"role": "system", "content": self.system}]
        if fix:
            self._undo()
        else:
            self._before = dict(self.overlay.changes)
        self.messages.append({"role": "user", "content": text})
        fmt = response_format(self.document)
        for attempt in range(self.rounds + 1):
            reply = self.model.complete(self.messages, [], response_format=fmt)
            self.usage.add(reply.usage)
            self.messages.append({"role": "assistant", "content": reply.content or ""})
            try:
                doc = parse_document(reply.content, self.document)
            except DocumentError as exc:
                self.invalid_answers += 1
                if attempt == self.rounds:
                    start = " ".join((reply.content or "").split())[:200]
                    raise LearningError(f"structured mode: the model's answer is not a valid {self.document.__name__} "
                                        f"after {attempt + 1} tries ({exc}); it began: {start!r}") from None
                self.messages.append({"role": "user", "content": f"That answer is {exc}. Answer again with only "
                                      "the JSON document of the schema."})
                continue
            self.applied = apply(doc, self.tools, self.screen)
            refused = [a for a in self.applied if not a.ok and not a.skipped]
            if refused and attempt < self.rounds:
                self._undo()
                self.messages.append({"role": "user", "content": "These entries were refused:\n" + "\n".join(
                    f"- {a.path} ({a.what}): {a.result}" for a in refused) + "\n" + self.fix_hint})
                continue
            break
        self.answer = report(doc, self.applied)
        return self.answer

    def _undo(self) -> None:
        self.overlay.changes.clear()
        self.overlay.changes.update(self._before)


def is_structured(mode: str | None) -> bool:
    return mode == ReviewMode.STRUCTURED


# -- which mode suits a model: one tiny tool-call probe ------------------------------------------
PROBE_TOOL = {"type": "function", "function": {
    "name": "note", "description": "Record a short note.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}
PROBE_PROMPT = "Call the note tool with the text 'ok'. Do not answer in words."


@dataclass
class ModeAdvice:
    """What the probe saw and the mode it suggests (`called`: the model called the tool as asked)."""

    called: bool
    suggested: str
    detail: str


def probe_mode(model: Model) -> ModeAdvice:
    """Ask the model to call one trivial tool: a model that does not is better served by structured mode."""
    reply = model.complete([{"role": "user", "content": PROBE_PROMPT}], [PROBE_TOOL])
    called = any(c.name == "note" for c in reply.tool_calls)
    if called:
        return ModeAdvice(True, ReviewMode.TOOLS, "it called a tool when asked")
    return ModeAdvice(False, ReviewMode.STRUCTURED, "asked to call a tool, it answered in words")


def probe_vault(vault, environ: Mapping[str, str] | None = None) -> tuple[str, ModeAdvice]:
    """(the refine model's name, what the probe saw of it); raises HermesError when it cannot ask."""
    from ..agent.model import LiteLLMModel, ModelSettings

    settings = ModelSettings.for_vault(vault, "refine", environ=environ)
    settings.retries = 0
    return settings.model, probe_mode(LiteLLMModel(settings))


def check_mode(vault, environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """`doctor`'s review-mode row (ok, detail): the probe against the refine model, and whether
    hermes.yaml's modes agree with it. Run by the daemon when one is up (warm), or by the CLI."""
    from ..errors import HermesError

    try:
        model, advice = probe_vault(vault, environ)
    except HermesError as exc:
        return False, str(exc)
    remember_advice(vault.state_dir, model, advice)  # automatic reviews say what to set (service/auto_review)
    modes = {"refine.mode": vault.config.refine.mode, "learn.mode": vault.config.learn.mode}
    wrong = [k for k, m in modes.items() if m != advice.suggested]
    detail = f"{advice.suggested} suits {model}: {advice.detail}"
    if wrong and not advice.called:
        return False, detail + f"; set {' and '.join(f'{k}: structured' for k in wrong)} in hermes.yaml"
    if wrong:  # a model that calls tools does well in either mode: not a problem
        return True, detail + f" ({', '.join(f'{k}: {modes[k]}' for k in wrong)} works too)"
    return True, detail


ADVICE_FILE = "mode-advice.json"  # under .hermes/: what `doctor` found about the refine model


def remember_advice(state_dir, model: str, advice: ModeAdvice) -> None:
    """Keep what the probe found, so background reviews can say what to set (`unsuited_notice`)."""
    import os

    data = json.dumps({"model": model, "called": advice.called, "suggested": str(advice.suggested),
                       "detail": advice.detail})
    path = state_dir / ADVICE_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(data)
    os.replace(tmp, path)


def unsuited_notice(state_dir, model: str, mode: str) -> str | None:
    """The sentence saying what to set, when `doctor` found that `model` does not call tools and
    refine still runs in tools mode; None otherwise (no finding, another model, or already set)."""
    try:
        found = json.loads((state_dir / ADVICE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("model") != model or found.get("called") is not False:
        return None
    if mode == ReviewMode.STRUCTURED:
        return None
    return (f"automatic reviews run with refine.mode: {mode}, but `hermes-fs doctor` found that {model} does not "
            "call tools (it answered in words), so they are likely to learn nothing: set `refine.mode: structured` "
            "in hermes.yaml (or `refine.every_turns: 0` to stop automatic reviews)")
