"""The web editor against names and files made to mislead it (a real `hermes-fs web` process):
symlinked files are neither shown nor written through, a `%` in a branch name opens that branch,
and the size limits are the editor's own, each answered with what was wrong."""

from __future__ import annotations

import html
import json
import re
import socket
from urllib.parse import unquote, urlencode

import pytest
from conftest import git
from web_helpers import refine_change, start_web

from hermes_fs.service.web.edits import MAX_EDIT_CHARS, digest
from hermes_fs.service.web.security import MAX_FORM_BYTES, Keys
from hermes_fs.store.edit import edit


@pytest.fixture
def web(vault):
    procs = []

    def start(root=None):
        w = start_web(root or vault.root)
        procs.append(w)
        return w

    yield start
    for w in procs:
        w.stop()


def form(w, **fields) -> str:
    return urlencode({"csrf": Keys(w.token).csrf, **fields})


def _link_into(vault, name: str, target: str) -> None:
    refs = vault.root / "skills/writing-skills/references"
    refs.mkdir(exist_ok=True)
    (refs / name).symlink_to(target)


def test_a_symlinked_skill_file_is_never_written_through_nor_turned_into_a_file(vault, web):
    other = vault.root / "skills/writing-skills/references/real.md"
    other.parent.mkdir(exist_ok=True)
    other.write_text("the real text\n")
    _link_into(vault, "link.md", "real.md")
    link = vault.root / "skills/writing-skills/references/link.md"
    w = web()
    page = "/skills/writing-skills?file=references/link.md"
    code, _, body = w.request("GET", page)
    assert code == 400 and "symlink" in body and "the real text" not in body
    for base in (digest(b"the real text\n"), digest(b"something else")):  # the page's digest, and a stale one
        code, _, body = w.request("POST", page, form(w, text="replaced\n", base=base))
        assert code == 400 and "symlink" in body
        assert link.is_symlink() and str(link.readlink()) == "real.md"
        assert other.read_text() == "the real text\n"


def test_a_refused_edit_through_a_link_puts_the_link_back(vault):
    """The store's own swap: a change refused on its second attempt puts back a link, not a file
    holding `symlink:<target>`."""
    _link_into(vault, "link.md", "../SKILL.md")
    rel = "skills/writing-skills/references/link.md"
    link = vault.root / rel
    calls = []

    def change(files):
        calls.append(files.read(rel))
        if len(calls) > 1:
            raise ValueError("refused on the text it found")
        files.write(rel, b"new\n")
        return True

    with pytest.raises(ValueError):
        edit(vault.files, vault.git.lock, change)
    assert link.is_symlink() and str(link.readlink()) == "../SKILL.md"
    from hermes_fs.store.files import Symlink

    assert isinstance(calls[1], Symlink)  # the redo saw a link, never bytes that look like a file


def test_hermes_yaml_through_a_symlink_inside_a_skill_is_not_shown(vault, web):
    (vault.root / "hermes.yaml").write_text((vault.root / "hermes.yaml").read_text() + "# marker-7f3a\n")
    _link_into(vault, "settings.md", "../../../hermes.yaml")
    (vault.root / "skills/writing-skills/linked").symlink_to("../..")  # a linked folder, the same way
    w = web()
    for page in ("/skills/writing-skills?file=references/settings.md", "/skills/writing-skills?file=linked/hermes.yaml"):
        code, _, body = w.request("GET", page)
        assert code == 400 and "marker-7f3a" not in body, (page, body[:300])
        code, _, body = w.request("POST", page, form(w, text="model: x\n", base=digest(b"")))
        assert code == 400 and "marker-7f3a" not in body
    assert (vault.root / "hermes.yaml").read_text().endswith("# marker-7f3a\n")


def _links(body: str, pattern: str) -> list[str]:
    return [html.unescape(m) for m in re.findall(pattern, body)]


def test_a_percent_in_a_branch_name_opens_and_acts_on_that_branch(agent_vault, model_server, tmp_path, web):
    branch = refine_change(agent_vault, model_server, tmp_path, skill=False)
    tricky, plain = f"{branch}-x%41", f"{branch}-xA"  # %41 decoded is A: another branch
    git(agent_vault, "branch", tricky, branch)
    git(agent_vault, "branch", plain, branch)
    w = web(agent_vault.root)
    _, _, body = w.request("GET", "/")
    hrefs = _links(body, r'href="(/changes/[^"]+)"')
    assert {unquote(h) for h in hrefs} >= {f"/changes/{tricky}", f"/changes/{plain}"}, hrefs
    href = next(h for h in hrefs if unquote(h) == f"/changes/{tricky}")
    code, _, page = w.request("GET", href)
    assert code == 200 and html.escape(tricky) in page
    action = _links(page, r'action="(/changes/[^"]+/reject)"')[0]
    code, headers, _ = w.request("POST", action, form(w))
    assert code == 303
    assert git(agent_vault, "branch", "--list", tricky).strip() == ""  # the one asked for was rejected
    assert git(agent_vault, "branch", "--list", plain).strip() != ""  # the other stays pending
    _, _, page = w.request("GET", headers["location"])
    assert "rejected" in page and html.escape(tricky) in page


@pytest.mark.slow
def test_the_editor_saves_up_to_its_own_limit_and_says_why_beyond(vault, web):
    w = web()
    path = vault.root / "memory/USER.md"
    before = path.read_bytes()
    big = before.decode() + "- " + "x" * 1_500_000 + "\n"  # over the form parser's default of 1 MB
    code, headers, body = w.request("POST", "/memory/USER.md", form(w, text=big, base=digest(before)))
    assert code == 303, body[:500]
    assert path.read_text() == big and "edit: memory/USER.md" in git(vault, "log", "-1", "--format=%s")
    now = path.read_bytes()
    # 10 MB: under the form's byte limit, over the editor's: 413 with the reason, as a page or as JSON
    code, headers, body = w.request("POST", "/memory/USER.md", form(w, text="y" * 10_000_000, base=digest(now)))
    assert code == 413 and headers["content-type"].startswith("text/html"), (code, body[:300])
    assert f"at most {MAX_EDIT_CHARS:,} characters" in body and "nothing was saved" in body and "CSRF" not in body
    code, headers, body = w.request("POST", "/memory/USER.md", form(w, text="y" * 10_000_000, base=digest(now)),
                                    headers={"Accept": "application/json"})
    assert code == 413 and headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["max_chars"] == MAX_EDIT_CHARS and "10,000,000 characters" in answer["error"]
    assert path.read_bytes() == now


@pytest.mark.slow
def test_a_memory_file_of_1_8_mb_saves_in_a_few_seconds(vault, web):
    """The secret scan of a save (once, not once for the check and again for the commit; the
    detectors only on lines that may hold what they look for) no longer makes a 1.8 MB save slow."""
    import time

    w = web()
    path = vault.root / "memory/USER.md"
    before = path.read_bytes()
    lines = [f"- note {i}: the build server runs nightly backups to the archive at slot {i % 97}" for i in range(24000)]
    big = before.decode() + "\n".join(lines) + "\n"
    assert 1_800_000 < len(big) < MAX_EDIT_CHARS
    started = time.monotonic()
    code, _, body = w.request("POST", "/memory/USER.md", form(w, text=big, base=digest(before)))
    took = time.monotonic() - started
    assert code == 303, body[:500]
    assert path.read_text() == big
    print(f"1.8 MB save: {took:.2f} s")
    assert took < 60  # ~2 s on a quiet 2-core machine (16 s before); generous for a loaded one


def test_a_body_over_the_form_limit_is_answered_413_not_csrf(vault, web):
    w = web()
    with socket.create_connection(tuple(w.host.split(":")[:1]) + (int(w.host.split(":")[1]),), timeout=180) as s:
        s.sendall((f"POST /memory/USER.md HTTP/1.1\r\nHost: {w.host}\r\nAuthorization: Bearer {w.token}\r\n"
                   "Content-Type: application/x-www-form-urlencoded\r\n"
                   f"Content-Length: {MAX_FORM_BYTES + 1}\r\n\r\n").encode() + b"csrf=x&text=")
        answer = ""
        while "\r\n0\r\n" not in answer:  # the end of the chunked answer
            got = s.recv(65536)
            if not got:
                break
            answer += got.decode("utf-8", "replace")
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert "nothing was saved" in answer and "CSRF" not in answer and "text/html" in answer.split("\r\n\r\n")[0]
