"""Several machines under chaos: three vaults, each with its own daemon, share one bare remote
served by `git daemon` on 127.0.0.1; between each daemon and the remote sits a loopback TCP proxy
that is cut at random (partitions of 2-10 s); a random daemon is killed with SIGKILL every 3-8 s
and restarted; a fourth writer pushes plain commits the way a phone's git client does.

Meanwhile every machine appends lines to memory/MEMORY.md (as a person's editor would), one-shot
cron jobs fall due 1-2 s apart, and inbox requests are dropped on random machines. After the
chaos, every proxy is healed and every daemon is running again; then the bench checks:

* edit latency: from a line's commit on its machine to its arrival on every other machine's main
  (p50/p95/max; all edits, and the edits no kill or partition touched);
* 0 lost lines: every line written anywhere is on all three mains exactly once after healing
  (and how long that took), 0 conflict markers in tracked files, `git fsck` clean everywhere;
* cron: each due time has at most one claim and one output (and exactly one when a daemon was up);
* inbox: every request answered exactly once;
* takeovers: a claim of a killed daemon taken over within its expiry + 5 s.

It also reports the floor of the edit figure (`edit_latency_floor_s`): per edit, the wait its own
or another machine's kill or partition imposed on it, which no sync can shorten.

`python bench/sync.py` runs the full form (180 s, 100 jobs, 200 requests) and writes
bench/results/sync.json; `--no-partitions` runs the kills alone (sync_no_partitions.json);
tests/sync/test_sync_chaos.py runs a short form of the same code.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
os.environ.setdefault("HERMES_TEST_KEY", "bench")
os.environ.setdefault("HERMES_RETRY_BASE_S", "0.05")

from common import percentile, write_results  # noqa: E402
from gitserver import GitDaemon, Proxy  # noqa: E402
from model_server import ModelServer  # noqa: E402

from hermes_fs.service.sync import Syncer, clone_vault  # noqa: E402
from hermes_fs.store.provenance import Act  # noqa: E402
from hermes_fs.store.vault import Vault, init_vault  # noqa: E402

MEMORY = "memory/MEMORY.md"
PHONE = "notes/phone.md"


@dataclass
class Machine:
    name: str
    vault: Vault
    proxy: Proxy
    proc: subprocess.Popen | None = None
    down_since: float | None = None
    cut_until: float = 0.0
    cut_since: float = 0.0

    @property
    def root(self) -> Path:
        return self.vault.root

    verbose: bool = False  # the daemon's debug log (round and renewer timings) in bench-daemon.out

    def start(self) -> None:
        log = open(self.root / ".hermes" / "bench-daemon.out", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "hermes_fs", *(["-v"] if self.verbose else []),
                                      "--vault", str(self.root), "daemon", "--debounce", "0.3"],
                                     stdout=log, stderr=subprocess.STDOUT)
        self.down_since = None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.down_since = time.time()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def head(self) -> str | None:
        ref = self.root / ".git" / "refs" / "heads" / "main"
        try:
            return ref.read_text().strip()
        except OSError:
            out = subprocess.run(["git", "-C", str(self.root), "rev-parse", "-q", "--verify", "main"],
                                 capture_output=True, text=True)
            return out.stdout.strip() or None

    def show(self, sha: str, path: str) -> str:
        out = subprocess.run(["git", "-C", str(self.root), "show", f"{sha}:{path}"], capture_output=True)
        return out.stdout.decode("utf-8", "replace") if out.returncode == 0 else ""

    def files(self, prefix: str = "") -> list[str]:
        """Tracked files on main under `prefix` (all of them without one: git refuses an empty
        pathspec, which once left the marker check looking at no file at all)."""
        out = subprocess.run(["git", "-C", str(self.root), "ls-tree", "-r", "--name-only", "main",
                              *(["--", prefix] if prefix else [])], capture_output=True, text=True, check=True)
        return [p for p in out.stdout.splitlines() if p]


@dataclass
class Events:
    """What the chaos did, with times: to tell disturbed edits from undisturbed ones."""

    kills: list[tuple[float, str]] = field(default_factory=list)
    cuts: list[tuple[float, float, str]] = field(default_factory=list)  # start, end, machine
    downs: list[tuple[float, float, str]] = field(default_factory=list)  # killed, started again, machine

    def disturbed(self, start: float, end: float) -> bool:
        return any(start - 10 <= t <= end for t, _ in self.kills) or any(a <= end and b >= start for a, b, _ in self.cuts)

    def away(self, start: float, end: float, *names: str) -> float:
        """Seconds of [start, end] during which any of `names` was killed (until its daemon was
        started again) or cut off: time no sync can shorten. A restarted daemon's own start-up
        is not counted here, so it weighs on the product."""
        spans = sorted((max(a, start), min(b, end)) for a, b, n in self.cuts + self.downs
                       if n in names and a < end and b > start)
        total, reach = 0.0, start
        for a, b in spans:
            if b > reach:
                total += b - max(a, reach)
                reach = b
        return total

    def free_at(self, name: str, t: float) -> float:
        """The first moment from `t` on when `name` is neither killed nor cut off."""
        moved = True
        while moved:
            moved = False
            for a, b, n in self.cuts + self.downs:
                if n == name and a <= t < b:
                    t, moved = b, True
        return t


REMOTE = "remote"


class RefMoves:
    """When each machine's main (and the remote's main and host refs) moved, and to what: read
    from the ref files every SAMPLE_S, no git process, so what the bench measures does not wait
    for the CPU the daemons are using. A sampler that ran `git show` on every move (about ten git
    processes a turn) stalled for up to 5 s while restarted daemons loaded the machine, and every
    line that arrived meanwhile was counted late by that much (the reflogs had it on main seconds
    before). What each commit holds is read after the run (`lines`, one `git cat-file --batch`
    per repository)."""

    SAMPLE_S = 0.05

    def __init__(self, gitdirs: dict[str, Path]):
        self.gitdirs = gitdirs
        self.moves: list[tuple[float, str, str]] = []  # (time, machine or REMOTE, commit)
        self.max_gap_s = 0.0  # the longest time between two looks: a stalled sampler shows here

    def watch(self, stop: threading.Event) -> None:
        last: dict[tuple[str, str], str] = {}
        looked = time.time()
        while not stop.is_set():
            for where, gitdir in self.gitdirs.items():
                for ref, sha in self._refs(gitdir, where == REMOTE).items():
                    if last.get((where, ref)) != sha:
                        last[(where, ref)] = sha
                        self.moves.append((time.time(), where, sha))
            now = time.time()
            self.max_gap_s, looked = max(self.max_gap_s, now - looked), now
            stop.wait(self.SAMPLE_S)

    def _refs(self, gitdir: Path, remote: bool) -> dict[str, str]:
        """The watched refs, loose files over packed-refs (as git reads them)."""
        found = {}
        try:
            for row in (gitdir / "packed-refs").read_text().splitlines():
                sha, _, ref = row.partition(" ")
                if ref == "refs/heads/main" or (remote and ref.startswith("refs/hermes/hosts/")):
                    found[ref] = sha
        except OSError:
            pass
        loose = [gitdir / "refs" / "heads" / "main"]
        if remote:
            loose += (gitdir / "refs" / "hermes" / "hosts").glob("*/main")
        for path in loose:
            try:
                sha = path.read_text().strip()
            except OSError:
                continue
            if sha:
                found[str(path.relative_to(gitdir))] = sha
        return found

    def lines(self, written: dict[str, tuple[str, float]]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """(line -> machine -> first time on its main, line -> first time on the remote)."""
        seen: dict[str, dict[str, float]] = {}
        remote_seen: dict[str, float] = {}
        for line, (origin, t) in written.items():
            if origin == "phone":
                seen.setdefault(line, {})["phone"] = t  # pushed: on the remote's main from then on
        for where, gitdir in self.gitdirs.items():
            ordered = [(t, sha) for t, w, sha in self.moves if w == where]
            texts = _blobs(gitdir, sorted({sha for _, sha in ordered}), (MEMORY,) if where == REMOTE else (MEMORY, PHONE))
            for t, sha in ordered:
                for line in texts.get(sha, ()):
                    if where == REMOTE:
                        remote_seen.setdefault(line, t)
                    else:
                        seen.setdefault(line, {}).setdefault(where, t)
        return seen, remote_seen


def _blobs(gitdir: Path, shas: list[str], paths: tuple[str, ...]) -> dict[str, set[str]]:
    """The bench's lines in `paths` of each commit, in one `git cat-file --batch`."""
    asked = "".join(f"{sha}:{rel}\n" for sha in shas for rel in paths).encode()
    out = subprocess.run(["git", "--git-dir", str(gitdir), "cat-file", "--batch"], input=asked,
                         capture_output=True, check=True).stdout
    found: dict[str, set[str]] = {}
    pos = 0
    for sha in shas:
        lines = found.setdefault(sha, set())
        for _ in paths:
            end = out.index(b"\n", pos)
            header = out[pos:end].split()
            pos = end + 1
            if len(header) == 3 and header[1] == b"blob":
                size = int(header[2])
                text = out[pos:pos + size].decode("utf-8", "replace")
                pos += size + 1
                lines.update(line for line in text.splitlines() if line.startswith(("- chaos ", "phone ")))
    return found


def _floor(written, seen, events: Events) -> dict:
    """What no sync could beat: a line cannot leave its machine while that one is killed or cut
    off, nor reach another one while that one is. Per line, to the last other machine, as
    `edit_latency_s` counts it."""
    floors = []
    for line, (origin, _t) in written.items():
        arrivals = seen.get(line, {})
        if origin == "phone" or origin not in arrivals:
            continue
        start = arrivals[origin]
        leaves = events.free_at(origin, start)
        floors.append(max(events.free_at(n, leaves) for n in "abc" if n != origin) - start)
    if not floors:
        return {"n": 0}
    return {"p95": round(percentile(floors, 95), 2), "share_over_5s": round(sum(f > 5 for f in floors) / len(floors), 3),
            "n": len(floors), "what": "per edit, the wait that its own or another machine's kill or partition "
                                      "imposed on it; no sync can deliver sooner"}


def partition_step(machines: list[Machine], events: Events, now: float, next_cut: float, rng: random.Random,
                   cut_every: tuple[float, float] | None, cut_for: tuple[float, float]) -> float:
    """One tick of the partitions: heal the cuts that are over (and record them), then maybe cut
    a random machine. Healing first: a machine whose cut ended in the very tick it was chosen again
    was cut anew without its first cut ever being recorded (6 s of unrecorded partition in two of
    two full runs), and that time counted as the sync's in every figure. The next cut's time."""
    for m in machines:
        if m.cut_until and now >= m.cut_until:
            m.proxy.heal()
            events.cuts.append((m.cut_since, now, m.name))
            m.cut_until = 0.0
    if now >= next_cut:
        m = rng.choice(machines)
        if not m.cut_until:
            m.proxy.cut()
            m.cut_until = now + rng.uniform(*cut_for)
            m.cut_since = now
        next_cut = now + rng.uniform(*cut_every) if cut_every else float("inf")
    return next_cut


def _write_line(root: Path, rel: str, line: str) -> None:
    p = root / rel
    with open(p, "a", encoding="utf-8") as f:  # an editor appending and saving
        f.write(line + "\n")


def _drop_request(root: Path, n: int) -> None:
    tmp = root / "inbox" / f".req-{n}.md.tmp"
    tmp.write_text(f"---\ntype: run\n---\nRequest number {n}: say ok.\n")
    os.rename(tmp, root / "inbox" / f"req-{n}.md")  # editors write a temp file and rename it


class Phone:
    """A plain git client: clone, commit, push; on a rejected push, merge (never force) and retry."""

    def __init__(self, url: str, path: Path):
        self.path = path
        subprocess.run(["git", "clone", "-q", url, str(path)], check=True)
        for k, v in (("user.name", "phone"), ("user.email", "phone@example.org")):
            subprocess.run(["git", "-C", str(path), "config", k, v], check=True)

    def write(self, line: str) -> float | None:
        p = self.path / PHONE
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a") as f:
            f.write(line + "\n")
        return self._push(PHONE, f"phone: {line}")

    def request(self, n: int) -> float | None:
        """An inbox request that arrives through git: every machine sees it, one claims it by ref."""
        (self.path / "inbox").mkdir(exist_ok=True)
        (self.path / "inbox" / f"req-{n}.md").write_text(f"---\ntype: run\n---\nRequest number {n}: say ok.\n")
        return self._push(f"inbox/req-{n}.md", f"phone: request {n}")

    def _push(self, rel: str, message: str) -> float | None:
        g = ["git", "-C", str(self.path)]
        subprocess.run([*g, "add", rel], check=True)
        subprocess.run([*g, "commit", "-qm", message], check=True, capture_output=True)
        for _ in range(30):
            if subprocess.run([*g, "push", "-q", "origin", "main"], capture_output=True).returncode == 0:
                return time.time()
            subprocess.run([*g, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main"], capture_output=True)
        return None


def setup(work: Path, interval_s: float, ttl_s: float, jobs: int, job_start: datetime, job_gap: tuple[float, float],
          rng: random.Random, server: ModelServer) -> tuple[GitDaemon, list[Machine], list[tuple[str, datetime]]]:
    git = GitDaemon(work / "srv")
    git.bare()
    a = init_vault(work / "a").vault
    (a.root / "hermes.yaml").write_text(
        f"model: openai/test-model\napi_base: {server.api_base}\napi_key_env: HERMES_TEST_KEY\n"
        f"sandbox:\n  backend: none\nrefine:\n  every_turns: 0\nnotify:\n  events: []\n"
        f"remote:\n  url: {git.url()}\n  branch: main\n"
        f"sync:\n  interval_s: {interval_s}\n  claim_ttl_s: {ttl_s}\n")
    schedule = []
    due = job_start
    for i in range(jobs):
        name = f"job-{i:03d}"
        (a.root / "cron" / f"{name}.md").write_text(f"---\nschedule: \"at {due.isoformat()}\"\n---\nSay ok.\n")
        schedule.append((name, due))
        due += timedelta(seconds=round(rng.uniform(*job_gap)))  # whole seconds, like a person's `at` time
    (a.root / "notes").mkdir(exist_ok=True)
    (a.root / PHONE).write_text("# Notes from the phone\n")
    a.git.commit_all("bench: remote, jobs", Act.init())
    a.reload_config()
    Syncer(a).round(work=False)
    vaults = [a] + [clone_vault(git.url(), work / n) for n in ("b", "c")]
    machines = []
    for name, v in zip("abc", vaults, strict=True):
        proxy = Proxy(git.port)
        v.git.config_set("hermes.remoteUrl", git.url(port=proxy.port))
        machines.append(Machine(name, v, proxy))
    return git, machines, schedule


def run(duration_s: float = 180, jobs: int = 100, requests: int = 200, interval_s: float = 2.0, ttl_s: float = 20.0,
        seed: int = 1, kill_every: tuple[float, float] = (3, 8), cut_every: tuple[float, float] | None = (4, 10),
        cut_for: tuple[float, float] = (2, 10), settle_s: float = 300, work: Path | None = None,
        say=print, phone_every: int = 0, verbose: bool = False) -> dict:
    """`phone_every`: every n-th request is pushed by the phone instead of dropped on a machine
    (such a request is claimed by ref, so its claim can be taken over from a killed machine)."""
    rng = random.Random(seed)
    server = ModelServer(responder=lambda body: {"content": "ok"})
    tmp = tempfile.TemporaryDirectory(prefix="hermes-sync-bench-") if work is None else None
    work = Path(tmp.name) if tmp else Path(work)
    lead = 25.0  # seconds from the start to the first due time (daemons start, import, sync)
    start_at = datetime.now(UTC) + timedelta(seconds=lead)
    job_span = max(duration_s - lead - 10, 10)
    gap = (job_span / max(jobs, 1) * 0.66, job_span / max(jobs, 1) * 1.33) if jobs else (1, 2)
    gap = (max(1.0, gap[0]), max(2.0, gap[1])) if duration_s >= 120 else gap
    git, machines, schedule = setup(work, interval_s, ttl_s, jobs, start_at.replace(microsecond=0), gap, rng, server)
    for m in machines:
        m.verbose = verbose
    phone = Phone(git.url(), work / "phone")
    events = Events()
    written: dict[str, tuple[str, float]] = {}  # line -> (machine, time written)
    stop = threading.Event()
    bare = git.base / "vault.git"
    moves = RefMoves({m.name: m.root / ".git" for m in machines} | {REMOTE: bare})

    for m in machines:
        m.start()
    sampler = threading.Thread(target=moves.watch, args=(stop,), daemon=True)
    sampler.start()
    say(f"sync bench: 3 daemons, {jobs} jobs, {requests} requests, {duration_s:.0f} s of chaos (interval {interval_s} s, "
        f"claim ttl {ttl_s} s) in {work}")
    t0 = time.time()
    next_kill = t0 + lead + rng.uniform(*kill_every)
    next_cut = t0 + lead + rng.uniform(*cut_every) if cut_every else float("inf")  # None: no partitions
    req_gap = (duration_s - lead) / max(requests, 1)
    next_req, n_req, n_line, next_phone = t0 + lead, 0, 0, t0 + lead
    restarts: list[tuple[float, Machine]] = []
    while time.time() - t0 < duration_s:
        now = time.time()
        for m in machines:  # a line per machine per tick
            line = f"- chaos {m.name} {n_line}"
            _write_line(m.root, MEMORY, line)
            written[line] = (m.name, now)
        n_line += 1
        if now >= next_phone:
            line = f"phone {n_line}"
            pushed = phone.write(line)
            if pushed:
                written[line] = ("phone", pushed)
            next_phone = now + 3
        while n_req < requests and now >= next_req:
            if phone_every and n_req % phone_every == 0:
                phone.request(n_req)
            else:
                _drop_request(rng.choice(machines).root, n_req)
            n_req += 1
            next_req += req_gap
        if now >= next_kill:
            victim = rng.choice([m for m in machines if m.down_since is None] or machines)
            victim.kill()
            events.kills.append((now, victim.name))
            restarts.append((now + rng.uniform(1, 3), victim))
            next_kill = now + rng.uniform(*kill_every)
        for when, m in list(restarts):
            if now >= when:
                events.downs.append((m.down_since or now, time.time(), m.name))
                m.start()
                restarts.remove((when, m))
        next_cut = partition_step(machines, events, now, next_cut, rng, cut_every, cut_for)
        time.sleep(max(0.0, 1.0 - (time.time() - now)))
    while n_req < requests:  # what the chaos window had no time for
        _drop_request(rng.choice(machines).root, n_req)
        n_req += 1
    for m in machines:
        m.proxy.heal()
        if m.cut_until:
            events.cuts.append((m.cut_since, time.time(), m.name))
        m.cut_until = 0.0
        if m.proc is None or m.proc.poll() is not None:
            events.downs.append((m.down_since or time.time(), time.time(), m.name))
            m.start()
    healed = time.time()
    say(f"healed after {healed - t0:.0f} s; waiting for the three mains to agree")

    def lines_everywhere() -> bool:  # lines are never removed: on every main now is on every main
        return all(set(written) <= set(m.show("main", MEMORY).splitlines() + m.show("main", PHONE).splitlines())
                   for m in machines)

    def converged() -> bool:  # given every line everywhere
        if len({m.head() for m in machines}) != 1:
            return False
        answered = len(machines[0].files("outputs/requests/")) >= requests
        ran = len({p.split("/")[2] for p in machines[0].files("outputs/cron/")}) >= jobs
        return answered and ran

    converge_s = lines_s = None
    while time.time() - healed < settle_s:
        everywhere = lines_everywhere()  # six `git show`s: once a look, not again inside converged()
        if lines_s is None and everywhere:
            lines_s = time.time() - healed
        if everywhere and converged():
            converge_s = time.time() - healed
            break
        time.sleep(0.5)
    time.sleep(2 * interval_s)
    stop.set()
    sampler.join(5)
    for m in machines:
        m.stop()
    seen, remote_seen = moves.lines(written)
    result = check(machines, git, schedule, written, seen, events, requests, healed, ttl_s)
    result["edit_legs_net_s"] = _legs(written, seen, remote_seen, events)
    result["edit_latency_floor_s"] = _floor(written, seen, events)
    if not tmp:  # a kept work folder also keeps what happened to each line, for diagnosis
        (work / "records.json").write_text(json.dumps({
            "t0": t0, "healed": healed, "written": written, "seen": seen, "remote_seen": remote_seen,
            "kills": events.kills, "cuts": events.cuts, "downs": events.downs}, indent=1))
    result.update(duration_s=duration_s, interval_s=interval_s, claim_ttl_s=ttl_s, seed=seed,
                  kills=len(events.kills), partitions=len(events.cuts), sampler_max_gap_s=round(moves.max_gap_s, 2),
                  lines_everywhere_after_heal_s=round(lines_s, 1) if lines_s is not None else None,
                  converged_after_heal_s=round(converge_s, 1) if converge_s is not None else None)
    server.close()
    git.close()
    for m in machines:
        m.proxy.close()
    if tmp:
        tmp.cleanup()
    return result


def check(machines: list[Machine], git: GitDaemon, schedule, written, seen, events: Events, requests: int,
          healed: float, ttl_s: float) -> dict:
    heads = {m.name: m.head() for m in machines}
    dup = 0
    missing: dict[str, list[str]] = {}  # a lost line -> the mains without it: the failure names them
    for m in machines:
        body = m.show("main", MEMORY) + m.show("main", PHONE)
        counts: dict[str, int] = {}
        for line in body.splitlines():
            counts[line] = counts.get(line, 0) + 1
        dup += sum(1 for line in written if counts.get(line, 0) > 1)
        for line in written:
            if counts.get(line, 0) == 0:
                missing.setdefault(line, []).append(m.name)
    lost = sum(len(names) for names in missing.values())  # once per main that lacks the line
    latencies, quiet, net = [], [], []
    for line, (origin, _t) in written.items():
        arrivals = seen.get(line, {})
        if origin not in arrivals or len(arrivals) < 3 + (origin == "phone"):
            continue
        start = arrivals[origin]
        lat = max(t for name, t in arrivals.items() if name != origin) - start
        latencies.append(lat)
        if not events.disturbed(start, start + lat):
            quiet.append(lat)
        for name, t in arrivals.items():  # each other machine, less the time either end was away
            if name not in (origin, "phone"):
                net.append(t - start - events.away(start, t, origin, name))
    markers = 0
    for m in machines:
        for rel in m.files():
            if re.search(r"^(<<<<<<<|>>>>>>>) ", m.show("main", rel), re.M):
                markers += 1
    conflict_copies = len([p for p in machines[0].files() if ".conflict-" in p.rsplit("/", 1)[-1]])
    fsck = {m.name: subprocess.run(["git", "-C", str(m.root), "fsck", "--no-progress"], capture_output=True).returncode == 0
            for m in machines}
    fsck["remote"] = subprocess.run(["git", "fsck", "--no-progress"], cwd=git.base / "vault.git",
                                    capture_output=True).returncode == 0
    # outputs and answers as every main has them: a result only one main holds is not done yet
    per_main = [_count(m.files("outputs/cron/"), r"^outputs/cron/([^/]+)/") for m in machines]
    per_job = {job: min(p.get(job, 0) for p in per_main) if all(p.get(job, 0) <= 1 for p in per_main)
               else max(p.get(job, 0) for p in per_main) for job in set().union(*per_main)}
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname) %(objectname)", "refs/hermes/claims/cron/"],
                          cwd=git.base / "vault.git", capture_output=True, text=True).stdout.splitlines()
    claims_per_job: dict[str, int] = {}
    for line in refs:
        job = line.split("/")[4]
        claims_per_job[job] = claims_per_job.get(job, 0) + 1
    takeovers, kinds = [], []
    for line in subprocess.run(["git", "for-each-ref", "--format=%(objectname)", "refs/hermes/claims/"],
                               cwd=git.base / "vault.git", capture_output=True, text=True).stdout.split():
        # the whole story of the claim: a takeover is usually followed by renewals and `done`
        story = subprocess.run(["git", "log", "--format=%ct%n%B%x1e", line], cwd=git.base / "vault.git",
                               capture_output=True, text=True).stdout
        for msg in story.split("\x1e"):
            took = re.search(r"^Claim-Took-Over: \S+ ([0-9.]+)$", msg, re.M)
            if took:
                takeovers.append(int(msg.strip().split("\n", 1)[0]) - float(took.group(1)))
                kinds.append(msg.split("claim ", 1)[-1].split("/", 1)[0])  # "claim cron/...", "claim inbox/..."
    answered = [_count(m.files("outputs/requests/"), r"-req-(\d+)\.md$") for m in machines]
    answers = {str(n): (max if any(a.get(str(n), 0) > 1 for a in answered) else min)(a.get(str(n), 0) for a in answered)
               for n in range(requests)}
    return {
        "heads_agree": len(set(heads.values())) == 1,
        "edits": len(written),
        "edit_latency_s": {"p50": round(percentile(latencies, 50), 2) if latencies else None,
                           "p95": round(percentile(latencies, 95), 2) if latencies else None,
                           "max": round(max(latencies), 2) if latencies else None, "n": len(latencies)},
        "edit_latency_net_s": {"p50": round(percentile(net, 50), 2) if net else None,
                               "p95": round(percentile(net, 95), 2) if net else None,
                               "max": round(max(net), 2) if net else None, "n": len(net),
                               "what": "per edit and other machine, less the time either was killed or cut off"},
        "edit_latency_undisturbed_s": {"p50": round(percentile(quiet, 50), 2) if quiet else None,
                                       "p95": round(percentile(quiet, 95), 2) if quiet else None, "n": len(quiet)},
        "lost_lines": lost, "lost": [{"line": line, "written_on": written[line][0], "missing_on": names}
                                     for line, names in sorted(missing.items())[:20]],
        "duplicated_lines": dup, "conflict_markers": markers, "conflict_copies": conflict_copies,
        "fsck_clean": all(fsck.values()), "fsck": fsck,
        "cron": {"due_times": len(schedule), "with_one_output": sum(1 for n, _ in schedule if per_job.get(n) == 1),
                 "with_more_outputs": sum(1 for n, _ in schedule if per_job.get(n, 0) > 1),
                 "without_output": sum(1 for n, _ in schedule if per_job.get(n, 0) == 0),
                 "with_more_claims": sum(1 for n, _ in schedule if claims_per_job.get(n, 0) > 1)},
        "inbox": {"requests": requests, "answered_once": sum(1 for v in answers.values() if v == 1),
                  "answered_twice_or_more": sum(1 for v in answers.values() if v > 1),
                  "unanswered": sum(1 for v in answers.values() if v == 0),
                  "unanswered_on_every_main": sum(1 for n in range(requests) if not any(a.get(str(n)) for a in answered))},
        "takeovers": {"n": len(takeovers), "max_after_expiry_s": round(max(takeovers), 1) if takeovers else None,
                      "p50_after_expiry_s": round(percentile(takeovers, 50), 1) if takeovers else None,
                      "p95_after_expiry_s": round(percentile(takeovers, 95), 1) if takeovers else None,
                      "n_within_expiry_plus_5s": sum(1 for t in takeovers if t <= 5),
                      "within_expiry_plus_5s": all(t <= 5 for t in takeovers),
                      "by_kind": {kind: _lateness([t for t, k in zip(takeovers, kinds, strict=True) if k == kind])
                                  for kind in sorted(set(kinds))}},
    }


def _legs(written, seen, remote_seen, events: Events) -> dict:
    """Where a disturbed edit's time goes: up (committed on its machine -> on the remote, its main
    or the machine's host ref, less the time its machine was away) and down (on the remote -> on
    another machine's main, less the time that one was away)."""
    up, down = [], []
    for line, (origin, _t) in written.items():
        arrivals, there = seen.get(line, {}), remote_seen.get(line)
        if origin == "phone" or origin not in arrivals or there is None:
            continue
        start = arrivals[origin]
        up.append(max(0.0, there - start - events.away(start, there, origin)))
        for name, t in arrivals.items():
            if name not in (origin, "phone"):
                down.append(max(0.0, t - there - events.away(there, t, name)))

    def summary(values: list[float]) -> dict:
        return {"p50": round(percentile(values, 50), 2), "p95": round(percentile(values, 95), 2),
                "max": round(max(values), 2), "n": len(values)} if values else {"n": 0}

    return {"up": summary(up), "down": summary(down),
            "what": "up: committed on its machine -> on the remote (main or its host ref); down: on the remote -> "
                    "another machine's main; each less the time that machine was killed or cut off"}


def _lateness(after_expiry: list[float]) -> dict:
    return {"n": len(after_expiry), "p50_after_expiry_s": round(percentile(after_expiry, 50), 1),
            "max_after_expiry_s": round(max(after_expiry), 1),
            "n_within_expiry_plus_5s": sum(1 for t in after_expiry if t <= 5)}


def _count(paths: list[str], pattern: str) -> dict[str, int]:
    """How many of `paths` match `pattern`, by its first group (a job, a request number)."""
    found: dict[str, int] = {}
    for p in paths:
        m = re.search(pattern, p)
        if m:
            found[m.group(1)] = found.get(m.group(1), 0) + 1
    return found


def main() -> dict:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="60 s, 20 jobs, 40 requests")
    ap.add_argument("--duration", type=float, help="seconds of chaos (default 180)")
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--requests", type=int)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--phone-requests-every", type=int, default=0, metavar="N",
                    help="every N-th request is pushed by the phone (claimed by ref) instead of dropped on a machine")
    ap.add_argument("--verbose", action="store_true", help="the daemons' debug log in each vault's .hermes/bench-daemon.out")
    ap.add_argument("--work", type=Path, help="keep the vaults, remote and daemon logs here (for diagnosis)")
    ap.add_argument("--no-partitions", action="store_true",
                    help="kills only (writes sync_no_partitions.json): the edit figure without the partitions' own wait")
    ap.add_argument("--cut-every", type=float, nargs=2, metavar=("MIN", "MAX"), default=(4, 10),
                    help="seconds between partitions (default 4 10: one machine cut off about 60%% of the time); "
                         "other than the default, writes sync_cut_every_MIN_MAX.json")
    args = ap.parse_args()
    result = run(duration_s=args.duration or (60 if args.quick else 180),
                 jobs=args.jobs if args.jobs is not None else (20 if args.quick else 100),
                 requests=args.requests if args.requests is not None else (40 if args.quick else 200),
                 seed=args.seed, work=args.work, phone_every=args.phone_requests_every, verbose=args.verbose,
                 cut_every=None if args.no_partitions else tuple(args.cut_every))
    print(json.dumps(result, indent=2))
    name = "sync"
    if args.no_partitions:
        name = "sync_no_partitions"
    elif tuple(args.cut_every) != (4, 10):
        name = "sync_cut_every_{:g}_{:g}".format(*args.cut_every)
    write_results(name, result)
    return result


if __name__ == "__main__":
    main()
