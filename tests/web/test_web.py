"""The web page over HTTP (a real `hermes-fs web` process): security, bad input, the change page's
facts (entries, reasons, conflicts as the CLI states them), the daemon serving it, start cost."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from urllib.parse import urlencode

import pytest
from conftest import git, wait_for
from web_helpers import refine_change, start_web

from hermes_fs.learning import changes, review
from hermes_fs.service.web.security import TOKEN_NAME, Keys, load_token
from hermes_fs.store.notify import read_secrets_env
from hermes_fs.store.provenance import Act

USER = "memory/USER.md"


@pytest.fixture
def web(vault):
    procs = []

    def start(root=None, *args):
        w = start_web(root or vault.root, *args)
        procs.append(w)
        return w

    yield start
    for w in procs:
        w.stop()


def form(w, **fields) -> str:
    return urlencode({"csrf": Keys(w.token).csrf, **fields}, doseq=True)


def test_token_made_once_in_secrets_env_and_the_sign_in_cookie(vault, web):
    w = web()
    secrets_env = vault.root / ".hermes/secrets.env"
    assert read_secrets_env(secrets_env)[TOKEN_NAME] == w.token and len(w.token) >= 32
    assert stat.S_IMODE(secrets_env.stat().st_mode) == 0o600
    assert "HERMES_WEB_TOKEN" not in git(vault, "log", "-p", "--all")  # never committed
    code, headers, _ = w.request("GET", f"/memory?token={w.token}", cookie=False)
    assert code == 303 and headers["location"] == "/memory"  # the token leaves the address bar
    assert w.request("GET", f"//evil.example/?token={w.token}", cookie=False)[1]["location"] == "/evil.example/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and w.token not in cookie
    value = cookie.split(";")[0]
    code, headers, body = w.request("GET", "/memory", headers={"Cookie": value}, cookie=False)
    assert code == 200 and "USER.md" in body
    assert "script-src 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    w.stop()
    again = web()
    assert again.token == w.token  # made on first start only


def test_no_token_wrong_host_and_missing_csrf_are_refused(agent_vault, model_server, tmp_path, web):
    branch = refine_change(agent_vault, model_server, tmp_path, skill=False)
    w = web(agent_vault.root)
    assert w.request("GET", "/", cookie=False)[0] == 401
    assert w.request("GET", "/events", cookie=False)[0] == 401
    assert w.request("GET", "/", headers={"Authorization": "Bearer nope"}, cookie=False)[0] == 401
    assert w.request("GET", "/?token=%C3%A9t%C3%A9", cookie=False)[0] == 401  # not ASCII: still a plain no
    assert w.request("GET", "/", headers={"Cookie": "hermes_web=\u00e9t\u00e9"}, cookie=False)[0] == 401
    assert w.request("POST", f"/changes/{branch}/merge", "how=all&csrf=%C3%A9")[0] == 403
    # DNS rebinding: a hostile name that resolves to 127.0.0.1 still says its own name in Host
    assert w.request("GET", "/", headers={"Host": f"evil.example:{w.host.split(':')[1]}"})[0] == 421
    assert w.request("GET", "/", headers={"Host": "127.0.0.1:1"})[0] == 421
    merge = f"/changes/{branch}/merge"
    assert w.request("POST", merge, "how=all")[0] == 403  # no CSRF token
    assert w.request("POST", merge, "how=all&csrf=" + "0" * 64)[0] == 403
    assert w.request("POST", merge, form(w, how="all"), headers={"Origin": "http://evil.example"})[0] == 403
    assert w.request("GET", f"{merge}?how=all")[0] in (404, 405)  # GET never decides
    assert w.request("PUT", merge, form(w, how="all"))[0] == 405
    assert agent_vault.git.rev(f"refs/heads/{branch}")  # nothing merged
    code, headers, _ = w.request("POST", merge, form(w, how="all"))
    assert code == 303 and git(agent_vault, "log", "-1", "--format=%s", "main").startswith(f"merge {branch}")


def test_non_loopback_bind_without_a_token_is_refused(vault, run_cli, tmp_path):
    r = run_cli("--vault", str(vault.root), "web", "--listen", "0.0.0.0:0")
    assert r.returncode == 1 and "not loopback" in r.stderr and TOKEN_NAME in r.stderr
    assert not (vault.root / ".hermes/secrets.env").exists() or TOKEN_NAME not in (vault.root / ".hermes/secrets.env").read_text()
    env = tmp_path / "secrets.env"
    env.write_text(f"{TOKEN_NAME}=short\n")
    with pytest.raises(Exception, match="too short"):
        load_token(env, "127.0.0.1")
    env.write_text(f"{TOKEN_NAME}={'x' * 40}\n")
    assert load_token(env, "192.0.2.10") == "x" * 40  # a person's own token allows any bind
    (vault.root / ".hermes/secrets.env").write_text(f"{TOKEN_NAME}={'y' * 40}\n")
    r = run_cli("--vault", str(vault.root), "web", "--listen", "0.0.0.0:0")  # every address: no Host to check
    assert r.returncode == 1 and "Host header" in r.stderr


def test_conflict_shows_entry_both_versions_and_the_cli_next_steps(agent_vault, model_server, tmp_path, web, run_cli):
    from web_helpers import make_session

    from hermes_fs.learning.refine import RefineOptions, refine

    make_session(agent_vault, model_server, tmp_path, "No more concise answers: I want long, detailed answers now.")
    reason = 'memory/USER.md: wants detail (because the user said "I want long, detailed answers now")'
    model_server.add({"tool_calls": [("memory", {"action": "replace", "file": "USER.md", "old_text": "Prefers concise",
                                                 "text": "Prefers long, detailed answers."})]},
                     {"content": f"Summary: longer answers\n- {reason}"})
    result = refine(agent_vault, RefineOptions())
    branch = result.branch
    path = agent_vault.root / USER
    path.write_text(path.read_text().replace("Prefers concise answers", "Prefers terse answers"))
    agent_vault.git.commit_human_edits([USER])
    d = review.detail(agent_vault.git, branch)
    [f] = d.files
    [e] = f.entries
    assert e.action == "replaced" and "Prefers concise" in e.old and e.new == "- Prefers long, detailed answers."
    assert "I want long, detailed answers now" in e.reason  # the person's words that allow it
    w = web(agent_vault.root)
    code, _, body = w.request("GET", f"/changes/{branch}")
    assert code == 200 and "Merging now would conflict" in body
    assert f"<code>Refine-Session</code></td><td><code>{d.trailers['Refine-Session']}</code>" in body  # every trailer
    assert "Prefers terse answers" in body and "Prefers long, detailed answers." in body  # both versions
    import html

    assert changes.next_steps(branch, [USER]) in html.unescape(body)  # the CLI's next steps
    cli = run_cli("--vault", str(agent_vault.root), "review", "merge", branch)
    assert cli.returncode == 1
    code, headers, _ = w.request("POST", f"/changes/{branch}/merge", form(w, how="all"))
    assert code == 303
    _, _, page = w.request("GET", headers["location"])
    assert cli.stderr.strip().removeprefix("error: ") in html.unescape(page)  # exactly what the CLI says
    assert agent_vault.git.rev(f"refs/heads/{branch}")


def test_change_page_of_refine_and_learn_origins(agent_vault, model_server, tmp_path):
    from hermes_fs.learning.learn import LearnOptions, learn

    doc = tmp_path / "deploy-guide.md"
    doc.write_text("# Deploy guide\n\nAlways deploy with a rolling strategy and check the health of each machine.\n")
    from web_helpers import SKILL

    model_server.add({"tool_calls": [("skill_manage", {"action": "create", "name": "deploy-fly", "content": SKILL})]},
                     {"content": "done"})
    result = learn(agent_vault, LearnOptions([doc]))
    assert result.status == "pending", result.reason
    d = review.detail(agent_vault.git, result.branch)
    assert d.origin.kind == "learn" and d.origin.sources == [str(doc)]
    assert "rolling strategy" in d.origin.excerpt
    assert d.files[0].kind == "skill" and "+name: deploy-fly" in d.files[0].diff
    assert d.files[0].reasons  # the learn line for that file
    assert d.preview and d.preview.clean
    # a trailer can name any path: only documents are read (never a bare name like /etc/shadow)
    o = review.Origin("learn", sources=["/etc/passwd"])
    review._document(agent_vault.git, o)
    assert o.excerpt == "" and "not a document" in o.note


def test_bad_paths_and_names_are_clear_errors(vault, web):
    w = web()
    for path in ["/changes/refine/nope", "/changes/../../etc/passwd", "/sessions/not-a-session",
                 "/sessions/20260101-000000-abcd", "/skills/nope", "/memory/../hermes.yaml", "/memory/notes.md",
                 "/skills/writing-skills?file=../../hermes.yaml", "/skills/writing-skills?file=/etc/passwd",
                 "/static/../pages.py"]:
        code, _, body = w.request("GET", path)
        assert code in (400, 404), (path, code)
        assert "Traceback" not in body and "root:" not in body
    code, _, body = w.request("POST", "/memory/USER.md", form(w, text="x" * 6_000_000, base="absent"))
    assert code == 413 and "2,000,000 characters" in body  # the editor's own limit, said as such
    assert w.request("POST", "/log/revert", form(w, branch="refine/never"))[0] == 303  # an error message, no crash


def test_what_does_not_exist_is_404_by_its_error_type_bad_input_400(vault, web):
    """NotFound (a change, a skill, a session, a job) answers 404; any other bad input 400: by the
    exception's type, not by the wording of its message."""
    w = web()
    for path in ["/changes/refine/nope", "/skills/nope", "/sessions/20260101-000000-abcd"]:
        assert w.request("GET", path)[0] == 404, path
    for path in ["/memory/../hermes.yaml", "/memory/notes.md", "/skills/writing-skills?file=../../hermes.yaml"]:
        assert w.request("GET", path)[0] == 400, path


def test_editing_refuses_a_secret_and_shows_skill_validation(vault, web):
    w = web()
    from hermes_fs.service.web.edits import digest

    path = vault.root / USER
    before = path.read_bytes()
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
    code, _, body = w.request("POST", "/memory/USER.md", form(w, text=before.decode() + f"- key {key}\n", base=digest(before)))
    assert code == 409 and "refusing to save a secret" in body
    assert path.read_bytes() == before
    skill = vault.root / "skills/writing-skills/SKILL.md"
    old = skill.read_bytes()
    broken = old.decode().replace("name: writing-skills", "name: Writing_Skills")
    code, headers, _ = w.request("POST", "/skills/writing-skills", form(w, text=broken, base=digest(old)))
    assert code == 303
    _, _, body = w.request("GET", headers["location"])
    assert "Validation" in body and "Writing_Skills" in body
    assert git(vault, "log", "-1", "--format=%s", "main").strip() == "edit: skills/writing-skills/SKILL.md"


def test_web_start_does_not_import_litellm(vault):
    script = textwrap.dedent(f"""
        import sys, threading, urllib.request
        from hermes_fs.store.vault import Vault
        from hermes_fs.service.web.server import WebServer
        s = WebServer(Vault(__import__("pathlib").Path({str(vault.root)!r})), "127.0.0.1:0")
        s.start()
        for p in ["", "log", "memory", "memory/USER.md", "skills", "skills/writing-skills", "jobs", "sessions",
                  "sessions?q=x", "status"]:
            req = urllib.request.Request(s.url + p, headers={{"Authorization": "Bearer " + s.app.guard.keys.token}})
            assert urllib.request.urlopen(req).status == 200, p
        s.stop()
        print(sorted(m for m in ("litellm", "docker", "openai") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_daemon_serves_the_page_when_enabled(vault, daemon):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = vault.root / "hermes.yaml"
    cfg.write_text(cfg.read_text() + f"\nweb:\n  enabled: true\n  listen: 127.0.0.1:{port}\n")
    vault.git.commit_paths(["hermes.yaml"], "test: web page on", Act.person())
    d = daemon()
    assert wait_for(lambda: any("web page started" in e for e in d.state().get("last_events", [])), 30), d.output()
    token = read_secrets_env(vault.root / ".hermes/secrets.env")[TOKEN_NAME]
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=180)
    conn.request("GET", "/status", headers={"Authorization": f"Bearer {token}"})
    r = conn.getresponse()
    assert r.status == 200 and "running" in r.read().decode()
    url = subprocess.run([sys.executable, "-m", "hermes_fs", "--vault", str(vault.root), "web", "--url"],
                         capture_output=True, text=True, env=os.environ).stdout.strip()
    assert url == f"http://127.0.0.1:{port}/?token={token}"
    assert d.stop() == 0


def test_the_pages_feed_watches_refs_and_state_not_the_objects_git_writes(vault):
    """The feed (web/feed.py) watches .git/ and .hermes/ only where a page looks: a branch made,
    the daemon's state written and a memory file saved reach it; the objects git writes meanwhile
    are not even watched (they were queued, read and dropped, one by one)."""
    import threading

    from hermes_fs.service.web.feed import ChangeFeed

    handed: list[str] = []  # every file event the feed's watcher was handed, kept or not
    told: list[list[str]] = []  # what the pages are told
    lock = threading.Lock()
    feed = ChangeFeed(vault.root, on_change=told.append)
    feed.start()
    assert feed.watcher is not None
    keep = feed.watcher.keep

    def seen(rel: str) -> bool:
        with lock:
            handed.append(rel)
        return keep(rel)

    feed.watcher.keep = seen
    try:
        for i in range(5):  # objects only git writes (a blob each), under .git/objects/
            subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=vault.root, input=f"object {i}\n",
                           capture_output=True, text=True, check=True)
        git(vault, "branch", "refine/feed-test")
        (vault.state_dir / "daemon.json").write_text("{}\n")
        (vault.root / USER).write_text((vault.root / USER).read_text() + "- Seen by the feed\n")
        wanted = {"git:refs/heads/refine/feed-test", "daemon", USER}
        assert wait_for(lambda: wanted <= {name for names in told for name in names}, 30), (told, handed)
    finally:
        feed.stop()
    assert not [rel for rel in handed if rel.startswith(".git/objects/")], handed
