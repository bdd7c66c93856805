"""The daemon as a real process on a temp vault: real watchdog, real git, real signals."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import DaemonProc, git, wait_for  # noqa: F401 - DaemonProc for other tests

USER = "memory/USER.md"


def commits(vault) -> list[str]:
    return git(vault, "log", "--format=%s").splitlines()


def test_edit_is_committed_once_quiet(vault, daemon):
    daemon()
    n = len(commits(vault))
    p = vault.root / USER
    p.write_text(p.read_text() + "- Likes tea.\n")
    assert wait_for(lambda: len(commits(vault)) == n + 1)
    info = vault.git.commit_info("HEAD")
    assert info.summary == "edit: memory/USER.md" and info.trailers == {"Hermes-Change": "human-edit"}
    assert git(vault, "status", "--porcelain") == ""


def test_ten_quick_saves_make_one_commit(vault, daemon):
    daemon(debounce=1.0)
    n = len(commits(vault))
    p = vault.root / USER
    for i in range(10):
        p.write_text(p.read_text() + f"- save {i}\n")
        time.sleep(0.05)
    assert wait_for(lambda: len(commits(vault)) == n + 1)
    time.sleep(1.5)
    assert len(commits(vault)) == n + 1
    assert "- save 9" in git(vault, "show", "HEAD:memory/USER.md")


def test_atomic_save_and_several_files_in_one_commit(vault, daemon):
    daemon()
    n = len(commits(vault))
    tmp = vault.root / "memory" / ".USER.md.swp"
    tmp.write_text("swap")  # vim's swap file: ignored
    staged = vault.root / "memory" / "USER.md.tmp"
    staged.write_text((vault.root / USER).read_text() + "- Written atomically.\n")
    os.replace(staged, vault.root / USER)  # write temp + rename
    (vault.root / "memory" / "MEMORY.md").write_text((vault.root / "memory/MEMORY.md").read_text() + "- lesson\n")
    assert wait_for(lambda: len(commits(vault)) == n + 1)
    files = git(vault, "show", "--name-only", "--format=", "HEAD").split()
    assert files == ["memory/MEMORY.md", USER]
    time.sleep(1.0)
    assert len(commits(vault)) == n + 1
    assert "?? memory/.USER.md.swp" not in git(vault, "status", "--porcelain")  # gitignored, never committed


def test_swap_file_alone_makes_nothing(vault, daemon):
    d = daemon()
    n = len(commits(vault))
    (vault.root / "memory" / ".MEMORY.md.swp").write_text("x")
    (vault.root / "memory" / "USER.md~").write_text("backup")
    (vault.root / ".hermes" / "whatever").write_text("x")
    time.sleep(1.5)
    assert len(commits(vault)) == n
    assert d.state()["last_errors"] == []


def test_secret_edit_stays_uncommitted_and_is_reported(vault, daemon):
    d = daemon()
    n = len(commits(vault))
    (vault.root / "memory" / "MEMORY.md").write_text("- key sk-ant-api03-abcdefghijklmnopqrstuvwxyz\n")
    assert wait_for(lambda: d.state().get("last_errors"))
    assert "not committed: memory/MEMORY.md" in d.state()["last_errors"][0] and "API key" in d.state()["last_errors"][0] and "sk-ant" not in d.state()["last_errors"][0]
    assert len(commits(vault)) == n
    assert "sk-ant" in (vault.root / "memory/MEMORY.md").read_text()


@pytest.mark.slow
def test_dropped_run_request_gets_result_and_commit(agent_vault, model_server, daemon):
    vault = agent_vault
    model_server.add({"content": "Paris is the capital of France."})
    daemon()
    tmp = vault.root / "inbox" / ".q.md.tmp"
    tmp.write_text("---\ntype: run\n---\nWhat is the capital of France?\n")
    os.replace(tmp, vault.root / "inbox" / "capital.md")
    result = wait_for(lambda: list((vault.root / "outputs" / "requests").glob("*-capital.md")), 60)
    assert len(result) == 1
    assert wait_for(lambda: commits(vault)[0].startswith("request: capital.md"), 30)
    text = result[0].read_text()
    assert "status: ok" in text and "Paris is the capital of France." in text and "What is the capital of France?" in text
    assert not (vault.root / "inbox" / "capital.md").exists()
    assert git(vault, "status", "--porcelain") == ""
    info = vault.git.commit_info("HEAD")
    assert info.trailers == {"Hermes-Job": "inbox/capital.md"}


@pytest.mark.slow
def test_a_request_runs_nicer_than_the_daemon_and_its_commands_too(agent_vault, model_server, daemon):
    """Agent work yields the CPU to sync rounds and the watcher (service/priority.py): the
    request's shell command reports the niceness it inherited from the request's thread."""
    vault = agent_vault
    model_server.add({"tool_calls": [("shell", {"command": "nice"})]}, {"content": "done"})
    d = daemon()
    (vault.root / "inbox" / "nice.md").write_text("---\ntype: run\n---\nHow nice are you?\n")
    assert wait_for(lambda: list((vault.root / "outputs" / "requests").glob("*-nice.md")), 60), d.output()
    tool_results = [m.get("content") for m in model_server.requests[-1]["messages"] if m.get("role") == "tool"]
    base = os.getpriority(os.PRIO_PROCESS, d.proc.pid)
    assert any(str(base + 5) in str(c).split() for c in tool_results), tool_results
    assert os.getpriority(os.PRIO_PROCESS, d.proc.pid) == base  # the daemon's main thread is untouched


def test_the_daemon_hands_the_gil_over_sooner_than_python_does():
    """A sync thread waiting on git gets the GIL back from busy agent work within
    SWITCH_INTERVAL_S, not Python's 5 ms (service/priority.py; figures: bench/gil_switch.py)."""
    import sys

    from hermes_fs.service.priority import SWITCH_INTERVAL_S, favour_waiting_threads

    was = sys.getswitchinterval()
    assert was > SWITCH_INTERVAL_S  # Python's default, 5 ms
    try:
        favour_waiting_threads()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(was)


def daemon_with_a_short_inotify_queue(vault, daemon, queue: int):
    """A daemon whose inotify queue holds `queue` events (the sysctl is read when a watcher starts,
    and set back at once); skips where /proc/sys cannot be written."""
    knob = Path("/proc/sys/fs/inotify/max_queued_events")
    if not os.access(knob, os.W_OK):
        pytest.skip("shrinking the inotify queue needs root (CI runs as root)")
    assert sum(1 for _ in vault.root.rglob("*") if _.is_dir()) + 256 < queue  # a rebuild fits in the queue
    before = knob.read_text()
    try:
        knob.write_text(f"{queue}\n")
    except OSError as exc:  # a container's /proc/sys, read-only however root the user is
        pytest.skip(f"cannot shrink the inotify queue here: {exc}")
    try:
        return daemon()
    finally:
        knob.write_text(before)


def test_reading_the_vault_queues_no_events(agent_vault, daemon):
    """The daemon asks the kernel for writes only (watcher.written_events): git commands that only
    read (each opens dozens of files under .git/) queue nothing, so they neither cost the daemon's
    Python nor overflow its queue (bench/watch_events.py: 90 such commands, 5,622 events before)."""
    vault = agent_vault
    d = daemon_with_a_short_inotify_queue(vault, daemon, 1024)
    os.kill(d.proc.pid, signal.SIGSTOP)  # nothing is read from the queue meanwhile
    try:
        for _ in range(20):
            for args in (("status", "--porcelain"), ("log", "-3", "--format=%H"), ("cat-file", "-p", "HEAD")):
                git(vault, *args)
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    (vault.root / "memory" / "MEMORY.md").write_text("- Written after the reads\n")
    assert wait_for(lambda: "Written after the reads" in git(vault, "show", "HEAD:memory/MEMORY.md"), 60), d.output()
    assert "inotify queue overflowed" not in d.output().lower(), d.output()


def test_gits_own_writes_queue_no_events(agent_vault, daemon):
    """.git/ and .hermes/ are not watched at all (Watcher `skip`): what git writes there (here the
    index, 300 times: each a lock file made, written, closed and renamed, about five events for a
    recursive watch of the vault) queues nothing, so it cannot overflow a 1,024-event queue; the
    edit made next is committed as usual."""
    vault = agent_vault
    d = daemon_with_a_short_inotify_queue(vault, daemon, 1024)
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        for _ in range(300):  # git writes .git/index again each time: a lock made, written, renamed
            git(vault, "read-tree", "HEAD")
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    (vault.root / "memory" / "MEMORY.md").write_text("- Written after git wrote\n")
    assert wait_for(lambda: "Written after git wrote" in git(vault, "show", "HEAD:memory/MEMORY.md"), 60), d.output()
    assert "inotify queue overflowed" not in d.output().lower(), d.output()


def test_folders_moved_in_made_later_or_made_again_are_watched(agent_vault, daemon, tmp_path):
    """The vault's top-level folders are watched one by one (.git/ is not): a folder of notes
    moved in from elsewhere is committed, files in it included; one made later with its files at
    once, and one removed and made again, too."""
    vault = agent_vault
    d = daemon()
    outside = tmp_path / "elsewhere" / "notes"
    (outside / "deep").mkdir(parents=True)
    (outside / "a.md").write_text("note a\n")
    (outside / "deep" / "b.md").write_text("note b\n")
    outside.rename(vault.root / "notes")  # mv ~/elsewhere/notes ~/vault/
    tracked = lambda *paths: all(git(vault, "ls-files", p).strip() for p in paths)  # noqa: E731
    assert wait_for(lambda: tracked("notes/a.md", "notes/deep/b.md"), 60), d.output()
    (vault.root / "notes" / "deep" / "c.md").write_text("note c\n")  # its tree is watched from then on
    assert wait_for(lambda: tracked("notes/deep/c.md"), 60), d.output()
    subprocess.run(["sh", "-c", "mkdir -p later/x && echo one > later/x/one.md"], cwd=vault.root, check=True)
    assert wait_for(lambda: tracked("later/x/one.md"), 60), d.output()
    git(vault, "rm", "-q", "-r", "later")
    git(vault, "commit", "-q", "-m", "later gone")
    (vault.root / "later").mkdir()
    (vault.root / "later" / "two.md").write_text("two\n")
    assert wait_for(lambda: tracked("later/two.md"), 60), d.output()


@pytest.mark.slow
def test_what_an_inotify_overflow_lost_is_found_again(agent_vault, model_server, daemon):
    """A burst of more file events than the kernel queues (16,384 by default) loses events; a
    request dropped meanwhile was never taken (the sync chaos bench). The daemon's inotify queue is
    made 1,024 long (the sysctl is read when a watcher starts, and set back at once), the daemon is
    stopped while 600 files change (1,800 events) and a request is dropped, then let go on.
    Not shorter: watchdog answers an overflow by removing and re-adding every watch, and each
    removal queues an event, so a queue shorter than the vault's directories (.git/objects alone
    has up to 256) overflows again on every rebuild, without end (a 64-event queue did, in CI)."""
    vault = agent_vault
    model_server.add({"content": "found it"})
    queue, files = 1024, 600
    d = daemon_with_a_short_inotify_queue(vault, daemon, queue)
    (vault.root / "notes").mkdir(exist_ok=True)
    (vault.root / "notes" / "n0.md").write_text("note 0\n")  # committed: notes/ is watched (else
    assert wait_for(lambda: git(vault, "ls-files", "notes").strip(), 60), d.output()  # no events queue)
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        for i in range(files):
            (vault.root / "notes" / f"n{i}.md").write_text(f"note {i}\n")
        (vault.root / "inbox" / "lost.md").write_text("---\ntype: run\n---\nAnyone there?\n")
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    assert wait_for(lambda: list((vault.root / "outputs" / "requests").glob("*-lost.md")), 180), d.output()
    assert wait_for(lambda: len(git(vault, "ls-files", "notes").split()) == files, 180), d.output()
    assert "inotify queue overflowed" in d.output()


def test_malformed_and_unknown_requests_keep_their_text(vault, daemon):
    daemon()
    (vault.root / "inbox" / "broken.md").write_text("---\ntype: [unclosed\n---\nplease keep me\n")
    (vault.root / "inbox" / "odd.md").write_text("---\ntype: dance\n---\nalso keep me\n")
    results = wait_for(lambda: sorted((vault.root / "outputs" / "requests").glob("*.md")) if (vault.root / "outputs" / "requests").exists() and len(list((vault.root / "outputs" / "requests").glob("*.md"))) == 2 else None, 30)
    texts = {p.name.split("-", 3)[-1]: p.read_text() for p in results}
    assert "status: error" in texts["broken.md"] and "invalid YAML" in texts["broken.md"] and "please keep me" in texts["broken.md"]
    assert "type must be one of refine, learn, run" in texts["odd.md"] and "also keep me" in texts["odd.md"]
    assert wait_for(lambda: git(vault, "status", "--porcelain") == "", 10)


def test_second_daemon_is_refused(vault, daemon, run_cli):
    daemon()
    r = run_cli("--vault", str(vault.root), "daemon")
    assert r.returncode == 1 and "already running" in r.stderr
    r = run_cli("--vault", str(vault.root), "daemon", "status")
    assert "daemon: running" in r.stdout and "daemon started" in r.stdout


def test_sigterm_stops_cleanly_and_lock_is_free(vault, daemon, run_cli):
    d = daemon()
    assert d.stop(signal.SIGTERM) == 0
    assert "daemon: not running" in run_cli("--vault", str(vault.root), "daemon", "status").stdout
    subprocess.run(["git", "-C", str(vault.root), "fsck"], check=True, capture_output=True)
    assert not (vault.root / ".git" / "index.lock").exists()
    daemon()  # and it can start again


def _other_thread(pid: int) -> int:
    """A thread of the daemon that is not its main thread (the daemon always runs several)."""
    return next(int(t) for t in sorted(os.listdir(f"/proc/{pid}/task")) if int(t) != pid)


def test_a_sigterm_caught_by_another_thread_still_stops_the_daemon(vault, daemon):
    """kill(2) lets any thread of a process take the signal; Python runs the handler only when the
    main thread next runs Python code. A main thread asleep on an endless wait never did, and the
    daemon ignored SIGTERM for good (the CI hangs of the two-daemon tests). kill() on a thread id
    makes that thread the one that takes it."""
    d = daemon()
    os.kill(_other_thread(d.proc.pid), signal.SIGTERM)
    assert d.proc.wait(180) == 0, d.output()
    assert "stopping" in d.output()


def test_sigusr1_writes_every_threads_stack_to_the_log_and_the_daemon_goes_on(vault, daemon, run_cli):
    d = daemon()
    d.proc.send_signal(signal.SIGUSR1)
    assert wait_for(lambda: "SIGUSR1: the stack of every thread" in d.output(), 30), d.output()
    assert "Thread MainThread:" in d.output() and "_loop" in d.output()  # the main thread's and the others'
    log = vault.root / ".hermes" / "daemon.log"  # once a signal (the console has each line too)
    assert wait_for(lambda: log.read_text().count("SIGUSR1: the stack of every thread") == 1, 30), d.output()
    d.proc.send_signal(signal.SIGUSR1)  # and again, while the first is long written
    assert wait_for(lambda: log.read_text().count("SIGUSR1: the stack of every thread") == 2, 30), d.output()
    assert d.proc.poll() is None
    assert "daemon: running" in run_cli("--vault", str(vault.root), "daemon", "status").stdout
    assert d.stop() == 0


@pytest.mark.slow
def test_a_second_sigterm_while_stopping_exits_at_once_and_the_request_resumes(agent_vault, model_server,
                                                                              daemon):
    """The first signal waits for running jobs (here a turn the model takes 60 s over); a second
    one ends the process now, and the request, still claimed on disk, is answered at the next start."""
    vault = agent_vault
    model_server.add({"content": "slow answer", "delay": 60}, {"content": "second try answer"})
    d = daemon()
    (vault.root / "inbox" / "job.md").write_text("---\ntype: run\n---\nDo the thing.\n")
    assert wait_for(lambda: len(model_server.requests) == 1, 60)
    d.proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: "stopping" in d.output(), 30), d.output()
    assert d.proc.poll() is None  # waiting for the running turn
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(180) == 128 + signal.SIGTERM, d.output()
    assert "again while stopping" in d.output()
    daemon()
    assert wait_for(lambda: commits(vault)[0].startswith("request: job.md"), 60)
    results = list((vault.root / "outputs" / "requests").glob("*-job.md"))
    assert len(results) == 1 and "second try answer" in results[0].read_text()


@pytest.mark.slow
def test_kill_9_mid_request_then_restart_answers_exactly_once(agent_vault, model_server, daemon):
    vault = agent_vault
    model_server.add({"content": "slow answer", "delay": 30}, {"content": "second try answer"})
    d = daemon()
    (vault.root / "inbox" / "job.md").write_text("---\ntype: run\n---\nDo the thing.\n")
    assert wait_for(lambda: len(model_server.requests) == 1, 60)
    d.proc.kill()
    d.proc.wait()
    subprocess.run(["git", "-C", str(vault.root), "fsck"], check=True, capture_output=True)
    daemon()  # a killed daemon's lock is taken over
    assert wait_for(lambda: commits(vault)[0].startswith("request: job.md"), 60)
    results = list((vault.root / "outputs" / "requests").glob("*-job.md"))
    assert len(results) == 1 and "second try answer" in results[0].read_text()
    time.sleep(1.0)
    assert len(list((vault.root / "outputs" / "requests").glob("*-job.md"))) == 1
    assert sum(1 for c in commits(vault) if c.startswith("request: job.md")) == 1


def test_invalid_config_edit_keeps_last_good_settings(vault, daemon):
    d = daemon()
    (vault.root / "hermes.yaml").write_text("refine:\n  polcy: auto\n")
    assert wait_for(lambda: any("keeping the last good settings" in e for e in d.state().get("last_errors", [])))


def test_daemon_install_writes_a_systemd_unit(vault, run_cli, tmp_path):
    r = run_cli("--vault", str(vault.root), "daemon", "install", env={"HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    units = list((tmp_path / ".config" / "systemd" / "user").glob(f"hermes-fs-{vault.root.name}-*.service"))
    assert len(units) == 1 and f'"--vault" "{vault.root}" "daemon"' in units[0].read_text()


def test_cron_file_changes_reload_jobs_and_report_bad_ones(vault, daemon):
    d = daemon()
    (vault.root / "cron" / "nightly.md").write_text("---\nschedule: every day at 02:00\n---\nTidy up.\n")
    assert wait_for(lambda: any("loaded 2 cron job(s)" in e for e in d.state().get("last_events", [])))
    (vault.root / "cron" / "broken.md").write_text("---\nschedule: '99 * * * *'\n---\nx\n")
    assert wait_for(lambda: any("cron/broken.md" in e and "bad schedule" in e for e in d.state().get("last_errors", [])))
    assert any("loaded 2 cron job(s)" in e for e in d.state()["last_events"][-3:])


def test_interrupted_session_transcripts_are_committed_on_start(vault, daemon):
    from hermes_fs.mind.sessions import Transcript

    t = Transcript.start(vault.root, "m", "inbox")
    t.append({"role": "user", "content": "cut short"})
    daemon()
    assert t.rel in git(vault, "ls-files", "sessions")
    assert git(vault, "status", "--porcelain") == ""


def test_edits_made_while_the_daemon_was_down_are_committed_on_start(vault, daemon):
    p = vault.root / USER
    p.write_text(p.read_text() + "- written while no daemon ran\n")
    daemon()
    assert wait_for(lambda: git(vault, "status", "--porcelain") == "", 10)
    assert vault.git.commit_info("HEAD").summary == "edit: memory/USER.md"
