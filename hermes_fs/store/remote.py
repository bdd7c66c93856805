"""Transport to the vault's git remote: list, fetch, and compare-and-swap pushes. Plumbing only.

Every push names, for each ref it changes, the value that ref must have on the remote right now
(`--force-with-lease=<ref>:<expected>`, empty for "must not exist"), so a push is a
compare-and-swap done by the remote's receive-pack under its ref lock. A `+` refspec is never used
(it would override the lease) and neither is a plain push (it would fast-forward over a ref
someone else created). Several refs go up together with `--atomic`: all or none.

The remote's refs are mirrored under `refs/hermes/remote/` (`refs/heads/main` ->
`refs/hermes/remote/heads/main`), never under `refs/remotes/`, so a person's own `origin` and
their `git fetch` are left alone. Credentials stay with git (credential helpers, ssh keys); no
password is ever read or stored here. Policy (when to fetch, what to merge) is service/sync.py's.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GitError

MIRROR = "refs/hermes/remote/"
# What a machine shares: main and the learned branches, claims and leases, rejected changes, and
# each machine's own main (service/sync.py: what it has not got onto the contended main yet).
HOSTS = "refs/hermes/hosts/"
SHARED = ("refs/heads/", "refs/hermes/claims/", "refs/hermes/leases/", "refs/hermes/rejected/", HOSTS)
TIMEOUT_S = 30.0  # a remote that does not answer in this long counts as unreachable
PLAIN_GIT_PROTOCOL = "0"
"""The wire protocol for a `git://` remote (`git daemon`). Over a raw TCP connection, protocol v2
(git's default) sends its command in several small writes, and Nagle's algorithm holds the rest
until the daemon's delayed ACK, twice per connection; v0 does not wait (`python
bench/git_protocol.py` compares them). v0 sends the whole ref list each time instead of the refs
asked for, which a vault's few hundred refs make cheap. Other transports (ssh, https) keep git's
default: not measured, so not changed."""
LOCAL_RACE = ("cannot lock ref", "Unable to create")  # git's words for a local ref another git holds
LOCAL_RACE_TRIES = 5


class Unreachable(GitError):
    """The remote could not be reached (network, DNS, refused, timed out, authentication)."""


def mirror_of(ref: str) -> str:
    """The local mirror ref of a remote ref: refs/heads/main -> refs/hermes/remote/heads/main."""
    return MIRROR + ref.removeprefix("refs/")


@dataclass(frozen=True)
class RefUpdate:
    """Set `ref` on the remote to `new` (None deletes it) only if it is `expect` there now (None:
    only if it does not exist)."""

    ref: str
    new: str | None
    expect: str | None


@dataclass
class PushResult:
    accepted: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # ref -> git's reason ("stale info", ...)
    stale: set[str] = field(default_factory=set)  # of the rejected: lost their lease (the ref moved meanwhile)

    @property
    def ok(self) -> bool:
        return not self.rejected


_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]{1,15})://([^\s/@:]*)(:[^\s/@]*)?@")


def redact_credentials(text: str) -> str:
    """`text` with the credentials of every URL in it hidden: a password (`user:***@`), or an
    http(s) userinfo that is a token by itself (`***@`); an ssh user name stays (it is no secret).
    What a person reads (sync, status, logs, errors) goes through this; git gets the URL itself."""
    def hide(m: re.Match) -> str:
        scheme, user, password = m.group(1), m.group(2), m.group(3)
        if password:
            return f"{scheme}://{user}:***@"
        if scheme.lower() in ("http", "https") and user:
            return f"{scheme}://***@"
        return m.group(0)

    return _USERINFO.sub(hide, text)


class Remote:
    """One remote URL seen from one local repository (`url` for git, `shown` for people)."""

    def __init__(self, root: Path, url: str, timeout_s: float = TIMEOUT_S):
        if not url:
            raise GitError("no remote: set `remote.url` in hermes.yaml")
        self.root = Path(root)
        self.url = url
        self.shown = redact_credentials(url)
        self.timeout_s = timeout_s

    def _run(self, *args: str) -> tuple[int, str, str]:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C",
               # an ssh remote must never wait for a passphrase or a host-key question
               "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")}
        try:
            proc = subprocess.run(["git", "-c", "core.quotepath=off", *self._protocol(), *args], cwd=self.root,
                                  capture_output=True, env=env, timeout=self.timeout_s,
                                  start_new_session=True)  # a terminal's Ctrl-C is not for git
        except subprocess.TimeoutExpired:
            raise Unreachable(f"{self.shown}: no answer within {self.timeout_s:.0f} s") from None
        return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")

    def _protocol(self) -> list[str]:
        return ["-c", f"protocol.version={PLAIN_GIT_PROTOCOL}"] if self.url.startswith("git://") else []

    def _failure(self, err: str) -> str:
        lines = [ln.strip() for ln in err.replace(self.url, self.shown).splitlines() if ln.strip()]
        return redact_credentials(lines[-1]) if lines else "git failed without a message"

    def refs(self, *prefixes: str) -> dict[str, str]:
        """ref -> sha on the remote, for refs under `prefixes` (all shared ones by default)."""
        code, out, err = self._run("ls-remote", "--refs", self.url, *[p + "*" for p in (prefixes or SHARED)])
        if code != 0:
            raise Unreachable(f"{self.shown}: {self._failure(err)}")
        refs = {}
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref:
                refs[ref] = sha
        return refs

    def _fetch(self, *args: str) -> tuple[int, str, str]:
        """`git fetch`, again when it lost the race for a local mirror ref to another fetch of this
        repository (the sync round's and a lease read both mirror leases): that is no network
        failure, and the next try writes the same fresh value."""
        for attempt in range(LOCAL_RACE_TRIES):
            code, out, err = self._run("fetch", *args)
            if code == 0 or not any(s in err for s in LOCAL_RACE):
                break
            time.sleep(0.05 * (attempt + 1))
        return code, out, err

    def fetch(self, *names: str) -> None:
        """Mirror the remote's refs into refs/hermes/remote/ (deleted ones pruned), in one
        connection: a name ending in / is a namespace (SHARED without any), another is one ref."""
        names = names or SHARED
        specs = [f"+{n}*:{mirror_of(n)}*" if n.endswith("/") else f"+{n}:{mirror_of(n)}" for n in names]
        code, _out, err = self._fetch("--quiet", "--prune", "--no-tags", "--no-write-fetch-head", self.url, *specs)
        missing = [n for n in names if not n.endswith("/") and f"couldn't find remote ref {n}" in err]
        if code != 0 and missing:  # a named ref the remote does not have (any more): no mirror of it
            for n in missing:
                self._run("update-ref", "-d", mirror_of(n))
            rest = [n for n in names if n not in missing]
            return self.fetch(*rest) if rest else None
        if code != 0:
            raise Unreachable(f"{self.shown}: {self._failure(err)}")

    def fetch_ref(self, ref: str) -> str | None:
        """Mirror one remote ref now; its sha (as fetched, so its objects are here), or None if the
        remote does not have it."""
        code, _out, err = self._fetch("--quiet", "--no-tags", "--no-write-fetch-head", self.url,
                                      f"+{ref}:{mirror_of(ref)}")
        if code != 0:
            if "couldn't find remote ref" in err:
                self._run("update-ref", "-d", mirror_of(ref))
                return None
            raise Unreachable(f"{self.shown}: {self._failure(err)}")
        code, out, _err = self._run("rev-parse", "-q", "--verify", mirror_of(ref))
        return out.strip() or None

    def push(self, updates: list[RefUpdate], atomic: bool = True) -> PushResult:
        """Compare-and-swap each ref (see the module docstring); with `atomic`, all or none."""
        if not updates:
            return PushResult()
        args = ["push", "--porcelain", "--no-verify"]
        if atomic and len(updates) > 1:
            args.append("--atomic")
        for u in updates:
            args.append(f"--force-with-lease={u.ref}:{u.expect or ''}")
        args.append(self.url)
        args += [f"{u.new or ''}:{u.ref}" for u in updates]  # never a leading +
        code, out, err = self._run(*args)
        result = PushResult()
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) < 3 or len(parts[0]) != 1:
                continue
            flag, spec, summary = parts[0], parts[1], parts[2]
            ref = spec.rsplit(":", 1)[-1]
            if flag == "!":
                result.rejected[ref] = summary  # e.g. "[rejected] (stale info)", "[rejected] (atomic push failed)"
                if "(stale info)" in summary:  # git's words for a lease that failed: read here, once
                    result.stale.add(ref)
            else:
                result.accepted.append(ref)
        if code != 0 and not result.rejected:
            raise Unreachable(f"{self.shown}: {self._failure(err)}")
        for ref in (u.ref for u in updates):
            if ref not in result.accepted and ref not in result.rejected:
                result.rejected[ref] = "no status"
        return result
