"""The agent's tools, with the names and arguments of DESIGN section 7.

A ToolBox turns a call (name + raw JSON arguments) into a string for the model. Every bad
argument, refused path or failed operation comes back as `error: ...` the model can act on;
nothing here raises into the agent loop. File edits go through a FileStore (the live vault, or
a refine overlay) and, in a live session, a Committer that commits them on main.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import HermesError, InputError
from ..mind import memory, skills
from ..store.config import Config
from ..store.docs import decode
from ..store.edit import edit
from ..store.files import DiskFiles, FileStore, clean_relpath
from ..store.provenance import Act
from . import delegate, outgoing
from .boundary import check_vault_write, check_workspace_write
from .model import parse_arguments
from .outgoing import SANDBOX_MOUNT, OutgoingFile

if TYPE_CHECKING:  # only for types: the CLI's fast paths never load git or the sandbox here
    from ..store.git import GitStore
    from ..store.lock import VaultLock
    from .mcp_client import McpHub
    from .sandbox import Sandbox

READ_LIMIT = 100_000


def _s(description: str) -> dict:
    return {"type": "string", "description": description}


def _schema(name: str, description: str, props: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


SKILL_NAME = _s("the skill's folder name under skills/ (lowercase letters, digits, single hyphens)")
SCHEMAS = {
    "memory": _schema("memory", "Add, replace or remove one entry of a memory file. old_text: unique substring of the entry.", {
        "action": {"type": "string", "enum": ["add", "replace", "remove"],
                   "description": "add a new entry, replace the entry holding old_text, or remove it"},
        "file": _s("USER.md, MEMORY.md or projects/<slug>.md"),
        "text": _s("the entry's new text (add, replace)"),
        "old_text": _s("a substring found in exactly one entry (replace, remove)")}, ["action", "file"]),
    "skill_view": _schema("skill_view", "Read a skill's SKILL.md, or one of its files.", {
        "name": SKILL_NAME, "file": _s("a file inside the skill's folder, e.g. references/api.md (default SKILL.md)")},
        ["name"]),
    "skill_search": _schema("skill_search", "Find skills by keywords.", {"query": _s("keywords to look for")}, ["query"]),
    "skill_manage": _schema("skill_manage", "Create, patch or delete a skill, or write/remove a file in it. content: full SKILL.md for create.", {
        "action": {"type": "string", "enum": ["create", "patch", "write_file", "remove_file", "delete"],
                   "description": "what to do with the skill"},
        "name": SKILL_NAME,
        "content": _s("the whole SKILL.md (create) or the file's text (write_file)"),
        "old_text": _s("text found once in the file, to replace (patch)"),
        "new_text": _s("what replaces old_text (patch)"),
        "file": _s("a file under references/, scripts/ or assets/ (write_file, remove_file; patch: default SKILL.md)"),
        "merged_into": _s("the skill that now holds this one's steps (delete)")}, ["action", "name"]),
    "read_file": _schema("read_file", "Read a text file (vault-relative, or absolute in the workspace).", {
        "path": _s("a vault-relative path, or an absolute path in the workspace")}, ["path"]),
    "write_file": _schema("write_file", "Write a text file (vault-relative, or absolute in the workspace).", {
        "path": _s("a vault-relative path, or an absolute path in the workspace"),
        "content": _s("the file's whole new text")}, ["path", "content"]),
    "shell": _schema("shell", "Run a shell command in the sandbox workspace.", {
        "command": _s("the command, run by /bin/sh in the workspace"),
        "timeout_s": {"type": "number", "description": "seconds before it is stopped (at most the sandbox's limit)"}},
        ["command"]),
    "session_search": _schema("session_search", "Search past conversations.", {"query": _s("words to look for")}, ["query"]),
    "send_file": _schema("send_file", "Send a file to the person with your answer (a file in the workspace, or under "
                         "the vault's outputs/).", {
        "path": _s("the file: an absolute path in the workspace (/workspace/... in the sandbox), or outputs/..."),
        "caption": _s("a short line shown with the file (optional)"),
        "to": {"type": "array", "items": {"type": "string"},
               "description": "send it to these named destinations instead of this chat (optional)"}}, ["path"]),
    "write_pdf": _schema("write_pdf", "Write Markdown as a formatted PDF report in the workspace's outputs/ folder "
                         "(then send_file it, if the person should get it).", {
        "markdown": _s("the report's Markdown (headings, lists, tables, code; images are named, not embedded)"),
        "filename": _s("the PDF's file name, e.g. summary.pdf")}, ["markdown", "filename"]),
    "memory_read": _schema("memory_read", "Read a memory file (what you know about your owner, their work and their "
                           "customers' questions); it changes nothing.", {
        "file": _s("USER.md, MEMORY.md or projects/<slug>.md")}, ["file"]),
    "handoff": _schema("handoff", "Hand this chat to a person (your owner): when you cannot help, or the person asks "
                       "for a human. The owner gets your summary; you answer this chat no more until they give it "
                       "back.", {
        "reason": _s("why a person should take over, in one line"),
        "summary": _s("the chat so far and what was already tried, for the owner")}, ["reason", "summary"]),
}
SENDING_TOOLS = frozenset({"send_file"})  # offered only where the answer goes somewhere that carries files
READ_ONLY_TOOLS = frozenset({"skill_view", "skill_search", "read_file", "session_search", "memory_read"})  # change nothing
REVIEW_TOOLS = ["memory", "skill_view", "skill_manage", "read_file"]  # on an overlay: vault paths only
SUPPORT_ONLY = frozenset({"memory_read", "handoff"})  # offered to a customer's turn only (boundary.customer_tools)


@dataclass(frozen=True)
class ToolRequest:
    """A change a tool is about to make, once the trust boundary has let it through: what a
    person is asked to allow (kind: edit | execute | other, as the editor protocols name them)."""

    tool: str
    kind: str
    title: str
    paths: tuple[str, ...] = ()  # the files it writes (vault-relative, or absolute in the workspace)
    command: str | None = None  # what the shell runs
    content: str | None = None  # a whole file's new text (write_file), for a diff


class Permission(Protocol):
    """Asked before a tool changes anything (writes a file, runs a command, calls an MCP tool).
    Only ever narrows what the boundary allows: a False is refused as a tool error the model sees."""

    def allow(self, request: ToolRequest) -> bool: ...


class Refused(InputError):
    """The person said no to a change (tools.Permission)."""


class Committer(Protocol):
    @property
    def lock(self) -> VaultLock: ...  # held from the first read of a write to its commit

    def before_write(self, paths: list[str]) -> None: ...
    def after_write(self, paths: list[str], message: str) -> None: ...


@dataclass
class VaultCommitter:
    """Live writes (the agent in a session, an MCP client): pending human edits in those paths are
    committed first (so they keep their author), then the write is committed as `act`
    (`Act.session(id)`, `Act.client(name)`: the agent authors it, the person stays the committer)."""

    git: GitStore
    act: Act

    @property
    def lock(self) -> VaultLock:
        return self.git.lock

    def before_write(self, paths: list[str]) -> None:
        result = self.git.commit_human_edits(paths)
        if result.refused:  # a person's text that cannot be committed (it holds a secret): never overwrite it
            held = ", ".join(sorted({f.path for f in result.refused}))
            raise InputError(f"a person's uncommitted edit is in {held} (it holds a secret, so it cannot be "
                             "committed); not overwriting it: ask the person to fix that file first")

    def after_write(self, paths: list[str], message: str) -> None:
        self.git.commit_paths(paths, message, self.act)


@dataclass
class ToolBox:
    files: FileStore
    config: Config
    enabled: list[str] = field(default_factory=lambda: [n for n in SCHEMAS
                                                        if n not in SENDING_TOOLS and n not in SUPPORT_ONLY])
    committer: Committer | None = None
    vault_root: Path | None = None
    workspace: Path | None = None
    sandbox: Sandbox | None = None
    searcher: Callable | None = None  # (kind, query) -> list of hits
    skill_guard: Callable[[str, str], None] | None = None  # (name, content): raise to refuse a new skill
    skill_actions: tuple[str, ...] | None = None  # restrict skill_manage (e.g. learn --update: patch only)
    skill_names: tuple[str, ...] | None = None  # restrict which skills skill_manage may touch
    created_by: str | None = None  # metadata.created-by of new skills (default: session, or refine on an overlay)
    mcp: McpHub | None = None  # the session's MCP servers: tools named <server>__<tool>
    permission: Permission | None = None  # asked before each change (an editor's person); None: not asked
    changed: list[str] = field(default_factory=list)  # every vault path written, in order
    delegator: Callable[[object], str] | None = None  # the `delegate` tool (a Conversation above max_depth)
    outbox: Path | None = None  # where send_file stages the files it sends (.hermes/outbox); None: it cannot
    outgoing: list[OutgoingFile] = field(default_factory=list)  # files to send with this turn's answer
    destinations: tuple[str, ...] = ()  # names send_file's `to` may take (gateway.destinations this sender may use)
    handoff: Callable[[str, str], str] | None = None  # (reason, summary) -> what to tell the model: a customer's chat to its owner

    def schemas(self) -> list[dict]:
        return ([self._schema(n) for n in self.enabled] + ([delegate.SCHEMA] if self.delegator else [])
                + (self.mcp.schemas() if self.mcp else []))

    def _schema(self, name: str) -> dict:
        """A tool's schema; send_file's names the destinations this session may send to (or has no
        `to` at all when it may send nowhere else)."""
        if name != "send_file":
            return SCHEMAS[name]
        schema = copy.deepcopy(SCHEMAS[name])
        props = schema["function"]["parameters"]["properties"]
        if self.destinations:
            props["to"]["items"]["enum"] = list(self.destinations)
        else:
            del props["to"]
        return schema

    def call(self, name: str, raw_arguments: str) -> str:
        if name == delegate.NAME and self.delegator is not None:
            try:
                return self.delegator(parse_arguments(raw_arguments).get("tasks"))
            except (ValueError, HermesError) as exc:
                return f"error: {exc}"
        if self.mcp is not None and name not in self.enabled and self.mcp.owns(name):
            try:
                args = parse_arguments(raw_arguments)
                self._allowed(ToolRequest(name, "other", f"{name} (MCP tool)"))
                return self.mcp.call(name, args)
            except (ValueError, Refused) as exc:
                return f"error: {exc}"
        if name not in self.enabled:
            return f"error: unknown tool {name!r}; available: {', '.join(self.enabled)}"
        try:
            args = parse_arguments(raw_arguments)
            _check_args(name, args)
            return getattr(self, f"_t_{name}")(**args)
        except ValueError as exc:
            return f"error: {exc}"
        except HermesError as exc:
            return f"error: {exc}"
        except OSError as exc:
            return f"error: {exc.strerror or exc}"

    # -- writing with commits ------------------------------------------------------------------
    def _allowed(self, request: ToolRequest) -> None:
        if self.permission is not None and not self.permission.allow(request):
            raise Refused(f"the person did not allow this ({request.title}); do not retry it, ask them instead")

    def _write(self, paths: list[str], message: str, action: Callable[[FileStore], object], tool: str = "",
               content: str | None = None):
        """Every vault write of a tool: on an overlay, just the change (checked at its commit); live,
        under the vault's lock from the first read to the commit, checked before anything is written
        (size, secrets), swapped in so that no concurrent writer's text is lost, and put back if the
        commit fails, so a refused write leaves the file as it was."""
        if not self.committer:
            result = action(self.files)
        else:
            if not isinstance(self.files, DiskFiles):
                raise InputError("live writes need the vault's working tree")
            for p in paths:
                check_vault_write(self.vault_root, p)
            self._allowed(ToolRequest(tool, "edit", message, tuple(paths), content=content))
            with self.committer.lock.hold():
                self.committer.before_write(paths)
                done = edit(self.files, self.committer.lock, action, check_writes)
                try:
                    self.committer.after_write(paths, message)
                except BaseException:
                    done.undo()
                    raise
                done.settle()
                result = done.result
        for p in paths:
            if p not in self.changed:
                self.changed.append(p)
        return result

    # -- the tools ----------------------------------------------------------------------------------
    def _t_memory(self, action: str, file: str, text: str = "", old_text: str = "") -> str:
        name = memory.memory_name(file)
        path = f"{memory.MEMORY_DIR}/{name}"
        if action == "add":
            op = lambda f: memory.add(f, self.config, name, text)  # noqa: E731
        elif action == "replace":
            op = lambda f: memory.replace(f, self.config, name, old_text, text)  # noqa: E731
        elif action == "remove":
            op = lambda f: memory.remove(f, self.config, name, old_text)  # noqa: E731
        else:
            raise ValueError("action must be add, replace or remove")
        if action != "remove" and not text.strip():
            raise ValueError(f"text is required for {action}")
        m = self._write([path], f"memory: {action} in {path}", op, "memory")
        n = len(m.entries)
        return f"ok: {action} in {path} ({m.size}/{m.budget} chars, {n} {'entry' if n == 1 else 'entries'})"

    def _t_memory_read(self, file: str) -> str:
        if memory.memory_name(file) in ("USER.md",):  # the owner's own file: never read out to a customer
            raise ValueError("USER.md is the owner's own and is not shown here")
        view = memory.prompt_view(self.files, file, self.config)
        return view.body or f"({view.path} is empty)"

    def _t_handoff(self, reason: str, summary: str) -> str:
        if self.handoff is None:
            raise InputError("there is nobody to hand this chat to here")
        return self.handoff(reason.strip(), summary.strip())

    def _t_skill_view(self, name: str, file: str | None = None) -> str:
        text = skills.view(self.files, name, file)
        if file is None:
            extra = skills.read(self.files, name).files
            if extra:
                text += "\n\n(files in this skill: " + ", ".join(extra) + ")"
        return text

    def _t_skill_search(self, query: str) -> str:
        hits = self.searcher("skills", query) if self.searcher else []
        if not hits:
            return "no matching skills"
        return "\n".join(f"- {h.name}: {h.description}" for h in hits)

    def _t_skill_manage(self, action: str, name: str, content: str = "", old_text: str = "", new_text: str = "",
                        file: str | None = None, merged_into: str | None = None) -> str:
        skills.check_name(name)
        if self.skill_actions is not None and action not in self.skill_actions:
            raise ValueError(f"here skill_manage may only {', '.join(self.skill_actions)}")
        if self.skill_names is not None and name not in self.skill_names:
            raise ValueError(f"here skill_manage may only change {', '.join(self.skill_names)}")
        folder = f"{skills.SKILLS_DIR}/{name}"
        if action == "create":
            if self.skill_guard:
                self.skill_guard(name, content)
            meta = {"created-by": self.created_by or ("session" if self.committer else "refine"), "version": "1"}
            self._write([skills.skill_path(name)], f"skill: create {name}",
                        lambda f: skills.create(f, name, content, metadata=meta), "skill_manage")
            return f"ok: created skill {name}"
        if action == "patch":
            rel = skills.skill_path(name, file) if file else skills.skill_path(name)
            self._write([rel], f"skill: patch {name}", lambda f: skills.patch(f, name, old_text, new_text, file), "skill_manage")
            return f"ok: patched {rel}"
        if action == "write_file":
            if not file:
                raise ValueError("file is required for write_file")
            rel = skills.support_path(name, file)
            self._write([rel], f"skill: write {rel}", lambda f: skills.write_file(f, name, file, content), "skill_manage")
            return f"ok: wrote {rel}"
        if action == "remove_file":
            if not file:
                raise ValueError("file is required for remove_file")
            rel = skills.support_path(name, file)
            self._write([rel], f"skill: remove {rel}", lambda f: skills.remove_file(f, name, file), "skill_manage")
            return f"ok: removed {rel}"
        if action == "delete":
            paths = self.files.list(folder)
            self._write(paths, f"skill: delete {name}", lambda f: skills.delete(f, name, merged_into), "skill_manage")
            return f"ok: deleted skill {name}" + (f" (merged into {merged_into})" if merged_into else "")
        raise ValueError("action must be create, patch, write_file, remove_file or delete")

    def _t_read_file(self, path: str) -> str:
        where, target = self._resolve(path)
        data = self.files.read(target) if where == "vault" else \
            self._remote().read_file(target, READ_LIMIT) if where == "remote" else _read_host(target)
        if data is None:
            raise InputError("no such file", path)
        text = decode(data[:READ_LIMIT], path)
        return text + (f"\n[... truncated at {READ_LIMIT} bytes of {len(data)}]" if len(data) > READ_LIMIT else "")

    def _t_write_file(self, path: str, content: str) -> str:
        where, target = self._resolve(path)
        if where == "vault":
            self._write([target], f"write: {target}", lambda f: f.write(target, content.encode("utf-8")),
                        "write_file", content)
        elif where == "remote":
            if len(content.encode("utf-8")) > MAX_VAULT_WRITE:
                raise InputError(f"over the {MAX_VAULT_WRITE} bytes a tool may write", path)
            self._allowed(ToolRequest("write_file", "edit", f"write: {target}", (target,), content=content))
            self._remote().write_file(target, content.encode("utf-8"))
        else:
            assert self.workspace is not None
            check_workspace_write(target, self.workspace)
            self._allowed(ToolRequest("write_file", "edit", f"write: {target}", (target,), content=content))
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            Path(target).write_text(content, encoding="utf-8")
        return f"ok: wrote {len(content)} characters to {path}"

    def _remote(self):
        """The sandbox whose host holds the workspace files (`sandbox.backend: ssh`)."""
        assert self.sandbox is not None and hasattr(self.sandbox, "owns")
        return self.sandbox

    def _t_shell(self, command: str, timeout_s: float | None = None) -> str:
        if self.sandbox is None:
            raise InputError("the shell tool is not available here")
        if not command.strip():
            raise ValueError("command is empty")
        self._allowed(ToolRequest("shell", "execute", command, command=command))
        return self.sandbox.run(command, timeout_s).render()

    def _t_send_file(self, path: str, caption: str | None = None, to: list[str] | None = None) -> str:
        if self.outbox is None:
            raise InputError("files cannot be sent from here (the answer goes nowhere that carries files)")
        names = tuple(dict.fromkeys(to or []))
        unknown = [n for n in names if n not in self.destinations]
        if unknown:
            known = ", ".join(self.destinations) or "none are set up for this person"
            raise InputError(f"unknown destination(s) {', '.join(unknown)} (destinations: {known})")
        if len(self.outgoing) >= outgoing.MAX_FILES_PER_TURN:
            raise InputError(f"at most {outgoing.MAX_FILES_PER_TURN} files go with one answer")
        real = outgoing.resolve_sendable(path, self.workspace, self.vault_root)
        self._allowed(ToolRequest("send_file", "other", f"send {real.name}", (str(real),)))
        staged = dataclasses.replace(outgoing.stage(real, self.outbox, caption or ""), to=names)
        self.outgoing.append(staged)
        where = f"to {', '.join(names)}" if names else "with your answer"
        return (f"ok: {staged.name} ({outgoing.human_size(staged.size)}) will be sent {where}; "
                "do not paste its contents into the answer")

    def _t_write_pdf(self, markdown: str, filename: str) -> str:
        from .pdf import markdown_to_pdf, safe_pdf_name

        if self.workspace is None:
            raise InputError("there is no workspace to write the report in")
        name = safe_pdf_name(filename)
        folder = Path(os.path.realpath(self.workspace)) / REPORTS_DIR
        target = folder / name
        check_workspace_write(str(target), Path(os.path.realpath(self.workspace)))
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise InputError(f"{REPORTS_DIR}/ in the workspace is not a folder the agent may write")
        self._allowed(ToolRequest("write_pdf", "edit", f"write: {target}", (str(target),)))
        report = markdown_to_pdf(markdown, title=name[:-4])
        folder.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{name}.tmp")
        tmp.write_bytes(report.data)
        os.replace(tmp, target)
        shown = f"{SANDBOX_MOUNT}/{REPORTS_DIR}/{name}" if _mounts_workspace(self.sandbox) else str(target)
        note = " (laid out as plain text: the Markdown could not be laid out as a document)" if report.plain else ""
        if report.missing:
            note += f"; warning: {report.warning()}"
        return f"ok: wrote {shown} ({report.pages} page{'s' if report.pages != 1 else ''}, {len(report.data)} bytes){note}"

    def take_outgoing(self) -> list[OutgoingFile]:
        """The files this turn sends (and none for the next turn)."""
        files, self.outgoing = self.outgoing, []
        return files

    def _t_session_search(self, query: str) -> str:
        hits = self.searcher("sessions", query) if self.searcher else []
        if not hits:
            return "no matching sessions"
        return "\n".join(f"- {h.path} ({h.name}): {h.snippet}" for h in hits)

    # -- paths ---------------------------------------------------------------------------------
    def _resolve(self, path: str) -> tuple[str, str]:
        """('vault', clean relative path), ('workspace', absolute path) or ('remote', a path under a
        remote sandbox's workdir, checked there); anything else is refused."""
        if not isinstance(path, str) or not path.strip():
            raise ValueError("path is empty")
        if not os.path.isabs(path):
            return "vault", clean_relpath(path)
        owns = getattr(self.sandbox, "owns", None)  # a remote sandbox (ssh): its workdir's files are there
        if owns is not None and owns(path):
            return "remote", path
        real = os.path.realpath(path)
        if self.vault_root is not None:
            root = os.path.realpath(self.vault_root)
            if real == root or real.startswith(root + os.sep):
                return "vault", clean_relpath(os.path.relpath(real, root))
        if self.workspace is not None:
            ws = os.path.realpath(self.workspace)
            if real.startswith(ws + os.sep):
                top = real[len(ws) + 1 :].split(os.sep, 1)[0]
                if top in (".git", ".hermes"):
                    raise InputError(f"path is inside {top}/, which tools may not touch", path)
                return "workspace", real
        raise InputError("path is outside the vault and the workspace", path)


MAX_VAULT_WRITE = 1_000_000  # any one file a tool writes; skill files have their own, smaller cap
REPORTS_DIR = "outputs"  # write_pdf's folder in the workspace


def _mounts_workspace(sandbox: object) -> bool:
    """Whether the sandbox shows the workspace to commands as /workspace (Docker does)."""
    return getattr(sandbox, "mount", None) == SANDBOX_MOUNT


def check_writes(writes: dict[str, bytes | None]) -> None:
    """What a tool would write, refused before it touches the disk: a skill file over the skills cap
    (SKILL.md included), any file over 1 MB, or anything holding a secret."""
    from ..store import secrets

    for rel, data in writes.items():
        if data is None:
            continue
        cap = skills.MAX_FILE_BYTES if rel.startswith(f"{skills.SKILLS_DIR}/") else MAX_VAULT_WRITE
        if len(data) > cap:
            raise InputError(f"{len(data)} bytes is over the {cap} a file written here may hold; split it", rel)
    secrets.check(writes)


def _read_host(path: str) -> bytes | None:
    p = Path(path)
    return p.read_bytes() if p.is_file() else None


def _check_args(name: str, args: dict) -> None:
    params = SCHEMAS[name]["function"]["parameters"]
    props, required = params["properties"], params["required"]
    unknown = [k for k in args if k not in props]
    if unknown:
        raise ValueError(f"unknown argument(s) {', '.join(unknown)} for {name}; expected: {', '.join(props)}")
    missing = [k for k in required if args.get(k) in (None, "")]
    if missing:
        raise ValueError(f"missing required argument(s) for {name}: {', '.join(missing)}")
    for key, value in args.items():
        kind = props[key].get("type")
        if value is None:
            continue
        if kind == "string" and not isinstance(value, str):
            raise ValueError(f"{key} must be a string")
        if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{key} must be a number")
        if kind == "array" and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ValueError(f"{key} must be a list of names")
        if "enum" in props[key] and value not in props[key]["enum"]:
            raise ValueError(f"{key} must be one of {', '.join(props[key]['enum'])}")
