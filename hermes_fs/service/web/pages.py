"""The pages: each one a thin view over the library calls the CLI makes.

Pending changes and their pages (`learning.changes`, `learning.review`), the log with revert,
memory and skills (read, edit with compare-and-swap, validation), jobs (schedule in words, next
run, last runs, run now: the CLI's `cron run` in a process of its own), sessions (the FTS index,
"refine this session": the CLI's background refine), status (`service.status.collect`).

GET never changes anything; every action is a POST (checked for its CSRF token by `security.Guard`)
that answers with a redirect carrying a one-time message. Jinja2 escapes every value.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ...errors import HermesError, InputError, NotFound
from ...learning import changes, review, spend
from ...mind import memory, skills
from ...mind.sessions import parse_messages, recent_sessions, search_sessions, session_path
from ...store.docs import decode, parse_doc
from ...store.files import symlink_on_path
from ...store.vault import Vault
from ..decisions import decide
from . import edits
from .security import CSRF_FIELD, MAX_FORM_BYTES, Keys, wants_json

if TYPE_CHECKING:
    from ...store.claims import RefClaims

STATIC = {"app.js": "text/javascript", "style.css": "text/css"}
SESSION_LIST = 100  # newest sessions listed without a query
RUNS_SHOWN = 5  # last runs per job
REQUESTS_SHOWN = 100  # newest request results listed
_PARTS = re.compile(r"gateway|web page|sync|curat", re.I)  # the daemon's optional parts (channels say "gateway NAME")


def age(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M UTC")


def urlpath(value: object) -> str:
    """A name (branch, file, skill, session, job) as it goes into a URL path: every character
    that a URL gives a meaning (`%`, `?`, `#`, space) escaped, so the link opens that name."""
    return quote(str(value), safe="/")


async def read_form(request: Request):
    """The POSTed form; a field may be as large as the whole body the guard let through (the
    editor's own limit, in characters, is checked where the text is saved)."""
    return await request.form(max_part_size=MAX_FORM_BYTES)


def diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "fname"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")


class Site:
    def __init__(self, vault: Vault, keys: Keys, claims: RefClaims | None = None):
        self.vault = vault
        self.keys = keys
        self.claims = claims  # the daemon's claims on the remote; None: opened per decision (decisions.py)
        self.flashes: dict[str, tuple[str, str]] = {}
        self.env = Environment(loader=PackageLoader("hermes_fs.service.web", "templates"),
                               autoescape=select_autoescape(default=True, default_for_string=True),
                               trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(age=age, when=when, diff_class=diff_class, urlpath=urlpath)
        self.env.globals.update(csrf=keys.csrf, csrf_field=CSRF_FIELD)

    @property
    def store(self):
        return self.vault.git

    def warm(self) -> None:
        """Compile the templates and open git's object reader once the server listens, so the first
        page a person opens does not pay for them (and the start stays short)."""
        for name in self.env.list_templates(filter_func=lambda n: n.endswith(".html")):
            self.env.get_template(name)
        self.store.read_file(self.store.head(), "hermes.yaml")
        changes.pending(self.store)  # the files of each pending change, remembered per commit

    def routes(self) -> list[Route]:
        return [
            Route("/", self.pending_page),
            Route("/changes/{branch:path}/merge", self.merge, methods=["POST"]),
            Route("/changes/{branch:path}/reject", self.reject, methods=["POST"]),
            Route("/changes/{branch:path}", self.change_page),
            Route("/log", self.log_page),
            Route("/log/revert", self.revert, methods=["POST"]),
            Route("/memory", self.memory_page),
            Route("/memory/{name:path}", self.memory_file, methods=["GET", "POST"]),
            Route("/skills", self.skills_page),
            Route("/skills/{name}", self.skill_page, methods=["GET", "POST"]),
            Route("/jobs", self.jobs_page),
            Route("/jobs/{name}/run", self.run_job, methods=["POST"]),
            Route("/sessions", self.sessions_page),
            Route("/sessions/{sid}/refine", self.refine_session, methods=["POST"]),
            Route("/sessions/{sid}", self.session_page),
            Route("/requests", self.requests_page),
            Route("/requests/{name}", self.request_page),
            Route("/status", self.status_page),
            Route("/static/{name}", self.static),
            Route("/favicon.ico", lambda request: Response(status_code=204)),
        ]

    # -- rendering ---------------------------------------------------------------------------------
    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        flash = self.flashes.pop(request.query_params.get("flash", ""), None)
        if "pending_count" not in context:
            context["pending_count"] = len(self.store.branches(*changes.LEARNED_PREFIXES))
        html = self.env.get_template(template).render(request_path=request.url.path, flash=flash, **context)
        return HTMLResponse(html, status)

    def redirect(self, to: str, kind: str, text: str) -> RedirectResponse:
        key = secrets.token_hex(8)
        self.flashes[key] = (kind, text)
        while len(self.flashes) > 200:  # messages nobody came back for
            self.flashes.pop(next(iter(self.flashes)))
        return RedirectResponse(f"{to}{'&' if '?' in to else '?'}flash={key}", 303)

    def too_large(self, request: Request, message: str) -> Response:
        """413 with the reason: JSON for a client that asks for it (`Accept: application/json`),
        else the error page."""
        if wants_json(request.headers.get("accept", "")):
            return JSONResponse({"error": message, "max_chars": edits.MAX_EDIT_CHARS}, 413)
        return self.render(request, "error.html", 413, error=message)

    def failed(self, request: Request, exc: HermesError) -> HTMLResponse:
        status = 404 if isinstance(exc, NotFound) else 400
        return self.render(request, "error.html", status, error=str(exc))

    async def act(self, request: Request, work: Callable[[], tuple[str, str]], back: str) -> Response:
        """Run one decision (a library call) off the event loop; its message goes to the next page,
        an error back to `back` (a conflict keeps its whole text: entry, versions, next steps)."""
        try:
            to, text = await run_in_threadpool(work)
        except HermesError as exc:
            return self.redirect(back, "error", str(exc))
        return self.redirect(to, "ok", text)

    # -- pending changes ---------------------------------------------------------------------------
    def pending_page(self, request: Request) -> Response:
        rows = changes.pending(self.store)
        return self.render(request, "pending.html", rows=rows, pending_count=len(rows))

    def change_page(self, request: Request) -> Response:
        try:
            d = review.detail(self.store, request.path_params["branch"])
        except HermesError as exc:
            return self.failed(request, exc)
        return self.render(request, "change.html", d=d)

    async def merge(self, request: Request) -> Response:
        branch = request.path_params["branch"]
        form = await read_form(request)
        ticked = form.get("how") == "ticked"
        only = [str(f) for f in form.getlist("file")]
        page = f"/changes/{urlpath(branch)}"

        def work() -> tuple[str, str]:
            if ticked and not only:
                raise InputError("tick at least one file to merge only those")
            # authored by you: your decision; claimed first when the vault syncs
            done = decide(self.vault, branch, "merge", only=only if ticked else None, claims=self.claims)
            return (f"/changes/{urlpath(done.branch)}" if done.rest_pending else "/"), done.line()

        return await self.act(request, work, page)

    async def reject(self, request: Request) -> Response:
        branch = request.path_params["branch"]

        def work() -> tuple[str, str]:
            return "/", decide(self.vault, branch, "reject", claims=self.claims).line()

        return await self.act(request, work, f"/changes/{urlpath(branch)}")

    # -- log ---------------------------------------------------------------------------------------
    def log_page(self, request: Request) -> Response:
        return self.render(request, "log.html", rows=changes.learned_log(self.store), days=spend.per_day(self.vault))

    async def revert(self, request: Request) -> Response:
        branch = str((await read_form(request)).get("branch", ""))

        def work() -> tuple[str, str]:
            return "/log", decide(self.vault, branch, "revert", claims=self.claims).line()  # your decision

        return await self.act(request, work, "/log")

    # -- memory and skills -------------------------------------------------------------------------
    def memory_page(self, request: Request) -> Response:
        from ..status import memory_rows

        rows, errors = memory_rows(self.vault)
        return self.render(request, "memory.html", rows=rows, errors=errors)

    async def memory_file(self, request: Request) -> Response:
        try:
            rel = f"{memory.MEMORY_DIR}/{memory.memory_name(request.path_params['name'])}"
        except HermesError as exc:
            return self.failed(request, exc)
        return await self.editor(request, rel, "memory_file.html", lambda: self._memory_context(rel))

    def _memory_context(self, rel: str) -> dict:
        try:
            m = memory.load(self.vault.files, rel, self.vault.config)
        except InputError as exc:
            return {"problems": [str(exc)], "entries": [], "size": None, "budget": None}
        return {"problems": [f"over budget: {m.size} of {m.budget} characters; refine will consolidate it"]
                if m.over_budget else [], "entries": m.entries, "size": m.size, "budget": m.budget}

    def skills_page(self, request: Request) -> Response:
        loaded, errors = skills.load_all(self.vault.files)
        report = skills.check_all(self.vault.files)
        return self.render(request, "skills.html", skills=loaded, errors=[str(e) for e in errors], report=report)

    async def skill_page(self, request: Request) -> Response:
        name = request.path_params["name"]
        file = request.query_params.get("file") or skills.SKILL_FILE
        try:
            rel = skills.skill_path(name) if file == skills.SKILL_FILE else skills.support_path(name, file, any_file=True)
            if self.vault.files.read(skills.skill_path(name)) is None:
                raise NotFound(f"no skill named {name!r}", skills.skill_path(name))
        except HermesError as exc:
            return self.failed(request, exc)

        def context() -> dict:
            files = [p.split("/", 2)[2] for p in self.vault.files.list(f"{skills.SKILLS_DIR}/{name}")]
            return {"name": name, "file": file, "files": files, "problems": skills.validate(self.vault.files, name)}

        return await self.editor(request, rel, "skill.html", context)

    async def editor(self, request: Request, rel: str, template: str, context: Callable[[], dict]) -> Response:
        """Show a file in an editor; on POST save it (compare-and-swap) and show the result."""
        link = symlink_on_path(self.vault.root, rel, include_last=True)
        if link is not None:  # never followed, shown or written through: it may lead anywhere in the vault
            return self.failed(request, InputError(
                f"{link.relative_to(self.vault.root).as_posix()} is a symlink: the page neither follows nor "
                "edits links (edit the file it points to in your editor)", rel))
        saved = None
        yours = None
        if request.method == "POST":
            form = await read_form(request)
            yours = str(form.get("text", ""))
            if len(yours) > edits.MAX_EDIT_CHARS:  # before any work: 413, as the page and the API say
                return self.too_large(request, edits.too_long_message(len(yours)))
            try:
                saved = await run_in_threadpool(edits.save, self.vault, rel, yours, str(form.get("base", "")))
            except edits.TooLong as exc:
                return self.too_large(request, str(exc))
            except HermesError as exc:
                saved = edits.Saved(False, message=str(exc))
            if saved.ok:
                query = f"?file={quote(request.query_params['file'], safe='')}" if request.query_params.get("file") else ""
                return self.redirect(urlpath(request.url.path) + query, "ok", saved.message)
        try:
            data = self.vault.files.read(rel)
            text = decode(data, rel) if data is not None else ""
        except HermesError as exc:
            return self.failed(request, exc)
        base = edits.digest(data)
        if saved is not None and saved.current is not None:
            base = saved.current_digest  # saving again replaces the newer text, on purpose, after seeing it
        return self.render(request, template, 409 if saved else 200, rel=rel, text=yours if saved else text,
                           on_disk=text, base=base, saved=saved, **context())

    # -- jobs --------------------------------------------------------------------------------------
    def jobs_page(self, request: Request) -> Response:
        from ..job_state import job_states

        now = datetime.now(UTC)
        states = job_states(self.vault, now)  # the same reading as `cron list` and `status`
        rows = [{"job": s, "next": s.next_words(states.here, now), "runs": self._runs(s.job)} for s in states.jobs]
        return self.render(request, "jobs.html", rows=rows, errors=[str(e) for e in states.errors])

    def _runs(self, job: str) -> list[dict]:
        folder = self.vault.root / "outputs" / "cron" / job
        if not folder.is_dir():
            return []
        runs = []
        for path in sorted(folder.glob("*.md"), reverse=True)[:RUNS_SHOWN]:
            rel = path.relative_to(self.vault.root).as_posix()
            try:
                doc = parse_doc(decode(path.read_bytes(), rel), rel)
            except (InputError, OSError) as exc:
                runs.append({"rel": rel, "meta": {"status": "unreadable"}, "body": str(exc)})
                continue
            runs.append({"rel": rel, "meta": doc.meta, "body": doc.body.strip()})
        return runs

    async def run_job(self, request: Request) -> Response:
        name = request.path_params["name"]

        def work() -> tuple[str, str]:
            from ...mind import jobs as cron
            from ..background import spawn

            jobs, _errors = cron.load_jobs(self.vault.files, self.vault.config)
            if name not in {j.name for j in jobs}:
                raise NotFound(f"no valid job {name!r} in cron/")
            log = self.vault.state_dir / "logs" / f"cron-{name}-{datetime.now(UTC):%Y%m%d-%H%M%S-%f}.log"
            pid = spawn(self.vault.root, ["cron", "run", name], log)  # the CLI's `cron run`, in its own process
            return "/jobs", f"{name} started (pid {pid}); its output appears here when it finishes (log: {log})"

        return await self.act(request, work, "/jobs")

    # -- sessions ----------------------------------------------------------------------------------
    def sessions_page(self, request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        found = search_sessions(self.vault.root, query) if query else recent_sessions(self.vault.root, SESSION_LIST)
        rows = [{"id": s.id, "title": s.title, "snippet": s.snippet} for s in found]
        return self.render(request, "sessions.html", rows=rows, query=query)

    def session_page(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        try:
            rel = session_path(sid)
            data = self.vault.files.read(rel)
            if data is None:
                raise NotFound(f"no session {sid}", rel)
            doc = parse_doc(decode(data, rel), rel, required=True)
            messages = parse_messages(doc.body.lstrip("\n"), rel)
        except HermesError as exc:
            return self.failed(request, exc)
        return self.render(request, "session.html", sid=sid, meta=doc.meta, messages=messages)

    async def refine_session(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        focus = str((await read_form(request)).get("focus", "")).strip() or None

        def work() -> tuple[str, str]:
            from ...learning.refine import RefineOptions
            from ..background import refine_in_background

            if self.vault.files.read(session_path(sid)) is None:
                raise NotFound(f"no session {sid}")
            pid, log = refine_in_background(self.vault, RefineOptions(session=sid, focus=focus))
            return "/", f"refine of {sid} running in the background (pid {pid}); its change appears here (log: {log})"

        return await self.act(request, work, f"/sessions/{urlpath(sid)}")

    # -- requests ----------------------------------------------------------------------------------
    def requests_page(self, request: Request) -> Response:
        from ..request_results import recent_results

        return self.render(request, "requests.html", rows=recent_results(self.vault, REQUESTS_SHOWN))

    def request_page(self, request: Request) -> Response:
        from ..request_results import request_result

        try:
            found = request_result(self.vault, request.path_params["name"])
        except HermesError as exc:
            return self.failed(request, exc)
        return self.render(request, "request.html", r=found)

    # -- status ------------------------------------------------------------------------------------
    def status_page(self, request: Request) -> Response:
        from ..status import collect

        now = datetime.now(UTC)
        st = collect(self.vault, now)
        parts = [e for e in st.daemon.get("last_events") or [] if _PARTS.search(e)]
        return self.render(request, "status.html", st=st, parts=parts, failed=st.failed_requests,
                           jobs=[(j, j.next_words(st.host, now)) for j in st.cron])

    def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return Response("not found\n", 404, media_type="text/plain")
        data = resources.files("hermes_fs.service.web").joinpath("static", name).read_bytes()
        return Response(data, media_type=STATIC[name])
