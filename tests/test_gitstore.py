import hashlib
import multiprocessing
import subprocess
import time

import pytest
from conftest import git

from hermes_fs.errors import ConflictError, GitError, InputError, SecretError
from hermes_fs.store.git import GitStore, format_message, parse_trailers
from hermes_fs.store.provenance import Act, Provenance

USER = "memory/USER.md"


def index_digest(vault) -> str:
    return hashlib.sha256((vault.root / ".git" / "index").read_bytes()).hexdigest()


def edit(vault, rel, old, new):
    p = vault.root / rel
    p.write_text(p.read_text().replace(old, new))


def test_commit_paths_with_trailers_and_author(vault):
    store = vault.git
    (vault.root / "memory" / "MEMORY.md").write_text("---\ntitle: M\n---\n- learned\n")
    (vault.root / "notes.md").write_text("untouched\n")
    store.provenance = Provenance(agent=lambda: "Bot <bot@x>")
    sha = store.commit_paths(["memory/MEMORY.md"], "remember: learned", Act.session("s1"))
    info = store.commit_info(sha)
    assert info.summary == "remember: learned" and info.trailers == {"Hermes-Session": "s1"}
    assert info.author == "Bot <bot@x>"
    assert git(vault, "show", "--name-only", "--format=", sha).split() == ["memory/MEMORY.md"]
    assert "?? notes.md" in git(vault, "status", "--porcelain")
    assert store.commit_paths(["memory/MEMORY.md"], "again", Act.person()) is None  # nothing changed


def test_commit_paths_leaves_other_staged_work_alone(vault):
    (vault.root / "a.md").write_text("a\n")
    (vault.root / "b.md").write_text("b\n")
    git(vault, "add", "b.md")  # the person staged b.md themselves
    vault.git.commit_paths(["a.md"], "add a", Act.person())
    assert git(vault, "show", "--name-only", "--format=", "HEAD").split() == ["a.md"]
    assert "A  b.md" in git(vault, "status", "--porcelain")


def test_commit_deletion(vault):
    (vault.root / "cron" / "morning-brief.md").unlink()
    vault.git.commit_paths(["cron/morning-brief.md"], "remove job", Act.person())
    assert "cron/morning-brief.md" not in git(vault, "ls-files")


def test_human_edits_commit_and_secret_refusal(vault):
    edit(vault, USER, "concise", "very concise")
    (vault.root / "memory" / "MEMORY.md").write_text("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz\n")
    result = vault.git.commit_human_edits()
    assert result.committed == [USER]
    assert [(f.path, f.kind) for f in result.refused] == [("memory/MEMORY.md", "OpenAI API key")]
    info = vault.git.commit_info("HEAD")
    assert info.summary == "edit: memory/USER.md" and info.trailers == {"Hermes-Change": "human-edit"}
    assert "M memory/MEMORY.md" in git(vault, "status", "--porcelain")  # left uncommitted, not lost
    assert "sk-proj" in (vault.root / "memory" / "MEMORY.md").read_text()


def test_commit_paths_refuses_secret_without_staging(vault):
    (vault.root / "memory" / "MEMORY.md").write_text("token ghp_1234567890abcdefghijABCDEFGHIJklmnop\n")
    head = vault.git.head()
    with pytest.raises(SecretError, match="memory/MEMORY.md:1: GitHub token"):
        vault.git.commit_paths(["memory/MEMORY.md"], "oops", Act.person())
    assert vault.git.head() == head
    assert git(vault, "diff", "--cached", "--name-only") == ""


def test_overlay_commit_touches_neither_worktree_nor_index(vault):
    store = vault.git
    edit(vault, USER, "concise", "CONCISE")  # an uncommitted human edit must stay exactly as is
    status_before, index_before = git(vault, "status", "--porcelain"), index_digest(vault)
    disk_before = (vault.root / USER).read_bytes()
    s = store.head()
    sha = store.commit_overlay(s, "refine/20261130-x", {
        "memory/MEMORY.md": b"---\ntitle: M\n---\n- new lesson\n",
        "skills/new-skill/SKILL.md": b"---\nname: new-skill\ndescription: d\n---\nbody\n",
        "cron/morning-brief.md": None,
    }, format_message("learned things", ["- a", "- b"], {"Refine-Session": "s1"}), Act.learned())
    assert git(vault, "status", "--porcelain") == status_before
    assert index_digest(vault) == index_before
    assert (vault.root / USER).read_bytes() == disk_before
    assert not (vault.root / "skills" / "new-skill").exists()
    assert store.head() == s  # main did not move
    info = store.commit_info("refine/20261130-x")
    assert info.parents == [s] and info.trailers == {"Refine-Session": "s1"}
    changed = sorted(store.changed_paths(s, sha))
    assert changed == ["cron/morning-brief.md", "memory/MEMORY.md", "skills/new-skill/SKILL.md"]
    assert store.read_file(sha, "memory/MEMORY.md") == b"---\ntitle: M\n---\n- new lesson\n"
    assert store.read_file(sha, "skills/writing-skills/SKILL.md") == store.read_file(s, "skills/writing-skills/SKILL.md")
    assert "cron" not in git(vault, "ls-tree", "--name-only", sha).split()  # emptied folder removed
    subprocess.run(["git", "-C", str(vault.root), "fsck", "--strict"], check=True, capture_output=True)


def test_overlay_no_change_and_existing_branch(vault):
    s = vault.git.head()
    same = vault.git.read_file(s, USER)
    assert vault.git.commit_overlay(s, "refine/a", {USER: same}, "noop", Act.learned()) is None
    assert vault.git.rev("refs/heads/refine/a") is None
    vault.git.commit_overlay(s, "refine/a", {USER: same + b"- x\n"}, "one", Act.learned())
    with pytest.raises(GitError):  # update-ref with the zero old value: never overwrite a branch
        vault.git.commit_overlay(s, "refine/a", {USER: same + b"- y\n"}, "two", Act.learned())
    assert vault.git.read_file("refine/a", USER).endswith(b"- x\n")


@pytest.mark.parametrize("path", ["../escape.md", ".git/hooks/pre-commit", ".hermes/x", "/etc/passwd", "a/../../b", ""])
def test_overlay_rejects_bad_paths(vault, path):
    with pytest.raises(InputError):
        vault.git.commit_overlay(vault.git.head(), "refine/bad", {path: b"x"}, "bad", Act.learned())
    assert vault.git.rev("refs/heads/refine/bad") is None


def test_overlay_refuses_secret(vault):
    with pytest.raises(SecretError):
        vault.git.commit_overlay(vault.git.head(), "refine/s", {USER: b"key sk-ant-api03-abcdefghijklmnopqrstuvwxyz\n"}, "s", Act.learned())
    assert vault.git.rev("refs/heads/refine/s") is None


def _branch_adding_line(vault, name, line=b"- Prefers tabs over spaces.\n"):
    s = vault.git.head()
    new = vault.git.read_file(s, USER) + line
    return vault.git.commit_overlay(s, name, {USER: new}, f"add {line!r}", Act.learned())


def test_merge_keeps_uncommitted_human_edit_on_another_line(vault):
    _branch_adding_line(vault, "refine/1")
    edit(vault, USER, "# About the user", "# About me")  # not committed, a few lines above
    new = vault.git.merge("refine/1", "merge refine/1: tabs", Act.person())
    text = (vault.root / USER).read_text()
    assert "# About me" in text and "Prefers tabs over spaces." in text
    assert git(vault, "status", "--porcelain") == ""  # merged paths written and staged
    log = git(vault, "log", "--first-parent", "--format=%s", "main").splitlines()
    assert log[:2] == ["merge refine/1: tabs", "edit: memory/USER.md"]
    assert len(vault.git.commit_info(new).parents) == 2
    subprocess.run(["git", "-C", str(vault.root), "fsck"], check=True, capture_output=True)


def test_merge_conflict_changes_nothing(vault):
    s = vault.git.head()
    old = vault.git.read_file(s, USER)
    vault.git.commit_overlay(s, "refine/c", {USER: old.replace(b"concise", b"long")}, "c", Act.learned())
    edit(vault, USER, "concise", "short")  # same line, by a person, uncommitted
    with pytest.raises(ConflictError) as exc:
        vault.git.merge("refine/c", "merge refine/c: c", Act.person())
    assert exc.value.files == [USER]
    assert "short" in (vault.root / USER).read_text()  # the person's text survives
    assert vault.git.rev("refs/heads/refine/c")  # branch stays pending
    assert vault.git.commit_info("HEAD").summary == "edit: memory/USER.md"  # only their edit was committed


def test_revert_merge_and_refusal_after_human_edit(vault):
    _branch_adding_line(vault, "refine/r1")
    m1 = vault.git.merge("refine/r1", "merge refine/r1: tabs", Act.person())
    vault.git.revert_merge(m1, "revert refine/r1", Act.person())
    assert "tabs" not in (vault.root / USER).read_text()
    with pytest.raises(GitError, match="already undone"):
        vault.git.revert_merge(m1, "again", Act.person())
    with pytest.raises(GitError, match=f"nothing to revert: {USER} already as before .*that part is undone"):
        vault.git.revert_merge(m1, "again, one file", Act.person(), paths=[USER])  # names the part, not the whole

    _branch_adding_line(vault, "refine/r2", b"- Likes dark mode.\n")
    m2 = vault.git.merge("refine/r2", "merge refine/r2: dark", Act.person())
    edit(vault, USER, "- Likes dark mode.", "- Likes dark mode, except in the morning.")
    with pytest.raises(ConflictError) as exc:
        vault.git.revert_merge(m2, "revert refine/r2", Act.person())
    assert exc.value.files == [USER]
    assert "except in the morning" in (vault.root / USER).read_text()
    assert git(vault, "status", "--porcelain") == ""  # the edit was committed first, and kept


def test_reject_hides_branch_recoverably(vault):
    sha = _branch_adding_line(vault, "refine/no")
    hidden = vault.git.reject("refine/no")
    assert hidden == "refs/hermes/rejected/refine/no"
    assert vault.git.rev("refs/heads/refine/no") is None
    assert vault.git.rev(hidden) == sha
    assert "refine/no" not in git(vault, "branch", "--list")
    assert [b.name for b in vault.git.rejected()] == ["refine/no"]


def test_branches_listing(vault):
    _branch_adding_line(vault, "refine/a1")
    _branch_adding_line(vault, "learn/b1", b"- b\n")
    assert [b.name for b in vault.git.branches("refine/")] == ["refine/a1"]
    assert [b.name for b in vault.git.branches("learn/")] == ["learn/b1"]


def test_lost_ref_race_is_detected(vault):
    _branch_adding_line(vault, "refine/race")
    store = vault.git
    old = store.head()
    (vault.root / "x.md").write_text("x\n")
    newer = store.commit_paths(["x.md"], "meanwhile", Act.person())  # main moved since `old`
    merged_tree = store._git("rev-parse", "refine/race^{tree}").strip()
    stale = store._commit_tree(merged_tree, [old], "stale", Act.person())
    with pytest.raises(GitError, match="moved while merging"):
        store._advance_main(old, stale)
    assert store.head() == newer
    assert git(vault, "status", "--porcelain") == ""  # working tree put back


def _hold_lock(root, seconds, ready):
    store = GitStore(root)
    with store.lock.hold():
        ready.set()
        time.sleep(seconds)


def test_lock_serialises_processes(vault):
    ready = multiprocessing.Event()
    p = multiprocessing.Process(target=_hold_lock, args=(vault.root, 1.0, ready))
    p.start()
    assert ready.wait(10), "the holder never took the lock"
    other = GitStore(vault.root)
    with pytest.raises(Exception, match="busy"):
        with other.lock.hold(timeout=0.2):
            pass
    assert other.lock.holder() == p.pid
    p.join()
    with other.lock.hold(timeout=5):  # released when the holder ended
        pass


def test_killed_lock_holder_leaves_no_stale_lock(vault):
    ready = multiprocessing.Event()
    p = multiprocessing.Process(target=_hold_lock, args=(vault.root, 60, ready))
    p.start()
    assert ready.wait(10), "the holder never took the lock"
    other = GitStore(vault.root)
    assert other.lock.is_held()
    with pytest.raises(Exception, match="busy"):
        with other.lock.hold(timeout=0.2):
            pass
    p.kill()
    p.join()
    with GitStore(vault.root).lock.hold(timeout=5):
        pass


def test_trailer_round_trip():
    msg = format_message("summary", ["- change one: because", "- change two: because"],
                         {"Refine-Session": "2026/11/abc", "Refine-Focus": "multi\nline focus"})
    assert parse_trailers(msg) == {"Refine-Session": "2026/11/abc", "Refine-Focus": "multi line focus"}
    assert parse_trailers("just a summary\n") == {}


def test_one_store_shared_by_threads_reads_conflicts_right(vault):
    """The daemon shares one GitStore between its worker, cron and timer threads: a conflicted
    merge must never be read as clean (exit codes are returned, not stored), while other threads
    run git commands that succeed."""
    import threading

    store = vault.git
    base = store.head()
    skill = "skills/shared/SKILL.md"
    for i in range(6):  # six branches that each add the file main adds too, differently
        store.commit_overlay(base, f"refine/conflict-{i}", {skill: f"branch {i}\n".encode()}, "c", Act.learned())
    (vault.root / skill).parent.mkdir(parents=True)
    (vault.root / skill).write_text("main's own line\n")
    store.commit_paths([skill], "main edit", Act.person())
    results, errors = [], []

    def merge(i):
        try:
            store.merge(f"refine/conflict-{i}", "merge", Act.person())
            results.append(("merged", i))
        except ConflictError:
            results.append(("conflict", i))
        except Exception as exc:  # noqa: BLE001 - any other outcome is the bug this test looks for
            errors.append(exc)

    def busy():
        for _ in range(30):
            store.is_ancestor(base, store.head())
            store.dirty_paths()

    threads = [threading.Thread(target=merge, args=(i,)) for i in range(6)] + [threading.Thread(target=busy) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(results) == [("conflict", i) for i in range(6)]
    assert (vault.root / skill).read_text() == "main's own line\n"
    assert git(vault, "status", "--porcelain") == ""


def test_main_read_from_its_ref_file_agrees_with_git_packed_or_not(vault):
    """`head()` reads main's loose ref file (no git process: a sync round asked ten times); a
    packed ref, a ref file holding something else, or a `.git` that is not a folder go to git."""
    store = vault.git
    (vault.root / "memory" / "USER.md").write_text("- one\n")
    store.commit_human_edits()
    assert store.head() == git(vault, "rev-parse", "main").strip()
    git(vault, "pack-refs", "--all")  # the loose file is gone: git answers from packed-refs
    assert not (vault.root / ".git/refs/heads/main").exists()
    assert store.head() == git(vault, "rev-parse", "main").strip()
    (vault.root / "memory" / "USER.md").write_text("- two\n")
    store.commit_human_edits()  # a loose ref again, newer than the packed one
    loose = (vault.root / ".git/refs/heads/main").read_text().strip()
    assert store.head() == loose == git(vault, "rev-parse", "main").strip()
    assert loose not in (vault.root / ".git/packed-refs").read_text()
    assert store._loose_ref("refs/heads/no-such-branch") is None
    (vault.root / ".git/refs/heads/odd").write_text("ref: refs/heads/main\n")  # a symbolic ref file
    assert store._loose_ref("refs/heads/odd") is None


def test_another_branch_or_a_detached_head_checked_out_is_seen_before_any_commit(vault):
    """HEAD is read from .git/HEAD without a git process (asked before every commit)."""
    store = vault.git
    assert store.operation_in_progress() is None
    git(vault, "switch", "-q", "-c", "drafts")
    assert store.operation_in_progress() == "drafts is checked out instead of main"
    git(vault, "switch", "-q", "--detach", "main")
    assert store.operation_in_progress() == "a detached HEAD is checked out instead of main"
    git(vault, "switch", "-q", "main")
    assert store.operation_in_progress() is None


def test_a_persons_git_operation_is_repository_busy_by_type(vault):
    """What a person's git is doing is said by an exception type (sync waits on it), never by
    the wording of the message."""
    from hermes_fs.errors import GitError, RepositoryBusy

    store = vault.git
    git(vault, "switch", "-q", "-c", "drafts")
    (vault.root / "memory" / "USER.md").write_text("- on drafts\n")
    with pytest.raises(RepositoryBusy) as busy:
        store.commit_paths(["memory/USER.md"], "edit", Act.person())
    assert isinstance(busy.value, GitError)
    git(vault, "switch", "-q", "main")


def test_answers_about_two_commits_are_remembered_never_about_names_that_move(vault):
    store = vault.git
    first = store.head()
    (vault.root / "memory" / "USER.md").write_text("- moved on\n")
    second = store.commit_human_edits().sha
    assert store.is_ancestor(first, second) and not store.is_ancestor(second, first)
    assert store.changed_paths(first, second) == ["memory/USER.md"] and store.merge_base(first, second) == first
    assert not store.is_ancestor("main", first)  # main is `second`
    git(vault, "update-ref", "refs/heads/main", first, second)  # main moves back: asked again, by name
    assert store.is_ancestor("main", first) and store.merge_base("main", second) == first
    assert store.is_ancestor(first, second) and store.changed_paths(first, second) == ["memory/USER.md"]


def test_refs_and_blobs_through_the_public_plumbing(vault):
    """What sync, claims and leases ask of git outside the git modules: refs listed and moved by
    compare-and-swap (never main: main moves by commits and merges, under the vault lock), blob
    ids, the paths commits added with a trailer's value, a commit's trailers for a path."""
    store = vault.git
    head = store.head()
    store.update_ref("refs/hermes/test/a", head)
    assert store.refs("refs/hermes/test/") == {"refs/hermes/test/a": head}
    with pytest.raises(GitError):
        store.update_ref("refs/hermes/test/a", head, "0" * 40)  # "must not exist yet": it does
    for move in (lambda: store.update_ref("refs/heads/main", head), lambda: store.delete_ref("refs/heads/main")):
        with pytest.raises(GitError):
            move()
    store.delete_ref("refs/hermes/test/a", head)
    store.delete_ref("refs/hermes/test/a", head, missing_ok=True)  # gone already: no error
    assert store.refs("refs/hermes/test/") == {}
    assert store.blob_id(head, "memory/USER.md") == git(vault, "rev-parse", f"{head}:memory/USER.md").strip()
    assert store.blob_id(head, "nope.md") is None and store.blob_id("0" * 40, "memory/USER.md") is None
    (vault.root / "outputs" / "requests").mkdir(parents=True, exist_ok=True)
    for name, act in (("x.md", Act.sync("h1")), ("y.md", Act.person())):
        (vault.root / "outputs" / "requests" / name).write_text(name)
        store.commit_paths([f"outputs/requests/{name}"], f"add {name}", act)
    assert store.added_paths(head, "HEAD", "outputs/requests/", "Hermes-Host") == [
        ("", ["outputs/requests/y.md"]), ("h1", ["outputs/requests/x.md"])]  # newest first; no trailer: ""
    assert store.last_trailers("HEAD", "outputs/requests/x.md")["Hermes-Host"] == "h1"
    assert store.has_own_commit("HEAD", head) and not store.has_own_commit(head, "HEAD")
