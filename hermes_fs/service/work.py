"""Which machine does this work, once: the vault's claims on its remote, and the claims on
requests that came through git.

The claims (`store/claims.RefClaims`) are built once by the part that composes the others (the
daemon; a CLI command for itself: `open_claims`) and passed to every part that takes shared work:
the scheduler (cron due times), the inbox (requests), the sync round and service (renewals,
takeovers, the `done` claims pushed with main) and decisions on learned changes. One object per
process, so all of them see what this machine holds; `None` when the vault does not sync. Never a
process-wide cache: it would keep the settings of its first caller and share state between two
vaults opened at one root.

A request that came through git (tracked on main, so every machine sees it) is claimed under
`inbox/<blob>-<name>`, its blob on main and its file name: a request saved again with other text
is a new request. One dropped on this machine only is this machine's without a claim.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from urllib.parse import quote, unquote

from ..errors import HermesError
from ..store.claims import LEDGER_NAME, Claims, CronLedger, RefClaims, Take, parse_cron_key
from ..store.git import MAIN, GitStore
from ..store.host import host_id
from ..store.remote import Remote, Unreachable, mirror_of
from ..store.vault import Vault

URL_KEY = "hermes.remoteUrl"  # git config of one clone: this machine reaches the remote by another URL
INBOX_KEY = "inbox/"


def remote_url(vault: Vault) -> str | None:
    """The remote's URL for this machine: `git config hermes.remoteUrl` (untracked, per clone),
    else `remote.url` of hermes.yaml; None when the vault does not sync."""
    if vault.config.remote is None:
        return None
    return vault.git.config_get(URL_KEY) or vault.config.remote.url or None


def remote_for(vault: Vault) -> Remote:
    url = remote_url(vault)
    if not url:
        raise HermesError("no remote configured: add `remote: {url: ..., branch: main}` to hermes.yaml "
                          "(see the guide, \"Several machines\")")
    return Remote(vault.root, url)


def main_ref(vault: Vault) -> str:
    """The remote's branch that is the vault's main (`remote.branch`), as a full ref."""
    return vault.config.remote.ref if vault.config.remote else f"refs/heads/{MAIN}"


def sync_dir(vault: Vault) -> Path:
    d = vault.state_dir / "sync"
    d.mkdir(exist_ok=True)
    return d


def open_claims(vault: Vault) -> RefClaims | None:
    """The vault's claim refs on its remote, as this machine holds them (.hermes/sync/claims.json);
    None when the vault does not sync. Call once per process and pass the object on: two of them
    in one process would each overwrite what the other holds."""
    if remote_url(vault) is None:
        return None
    return RefClaims(vault.git, remote_for(vault), host_id(vault.state_dir), vault.config.sync.claim_ttl_s,
                     CronLedger(vault.state_dir / LEDGER_NAME), sync_dir(vault) / "claims.json")


def cron_claims(vault: Vault, claims: RefClaims | None) -> Claims:
    """What decides the cron due times here: the shared claims, or, without a remote, the local
    ledger of this machine alone."""
    if claims is not None:
        return claims
    return CronLedger(vault.state_dir / LEDGER_NAME, host_id(vault.state_dir))


# -- requests that came through git -------------------------------------------------------------
def request_key(vault: Vault, rel: str) -> str | None:
    """The claim key of an inbox request that arrived through git (tracked on main, so every
    machine sees it); None for one dropped on this machine (only this machine can take it)."""
    # main, or the fetched remote main: a merge writes the file before main moves, and the watcher
    # may see it in between; it is still a request that every machine sees
    for commit in (MAIN, mirror_of(main_ref(vault))):
        if blob := vault.git.blob_id(commit, rel):
            return f"{INBOX_KEY}{blob[:20]}-{quote(PurePosixPath(rel).name, safe='-_')}"
    return None


def request_name(key: str) -> str:
    """The file name in inbox/ of the request claimed as `key`."""
    return unquote(key.removeprefix(INBOX_KEY).split("-", 1)[1])


def _request_blob(key: str) -> str:
    """The (abbreviated) blob of the request claimed as `key`: hex, so the first hyphen ends it."""
    return key.removeprefix(INBOX_KEY).split("-", 1)[0]


def claim_request(vault: Vault, claims: RefClaims | None, rel: str) -> tuple[bool, str | None]:
    """May this machine take the inbox request `rel`, and under which claim key? Yes for a request
    dropped here (no key), or without a remote (`claims` None); for one that came through git, only
    if this machine wins its claim on the remote (offline: not now — it is taken when the remote
    answers again, or by a machine that can reach it). The key goes with the request
    (inbox.TakenRequest): once answered anywhere, main no longer holds the request, so it can no
    longer be computed from main."""
    if claims is None:
        return True, None
    key = request_key(vault, rel)
    if key is None:
        return True, None
    if not _held_here(claims, key) and claims.take(key) != Take.WON:
        return False, key
    if _still_asked(vault, claims, rel, key):
        return True, key
    claims.release(key)
    return False, key


def _held_here(claims: RefClaims, key: str) -> bool:
    """Is a request's claim already this machine's, its work not done? The renewer took it over
    from a dead machine and handed the request to the inbox; or a previous process of this
    machine claimed it and died before taking the file (it is adopted: renewed again from its
    last value, and a takeover meanwhile shows at the next renewal)."""
    held = claims.held.get(key)
    return held is not None and not held.done and (not held.orphan or claims.adopt(key))


def _still_asked(vault: Vault, claims: RefClaims, rel: str, key: str) -> bool:
    """Does the remote's main still hold this request? A machine far behind (offline for longer
    than claims are kept) can hold a request that was answered long ago and whose claim has been
    pruned; winning the claim then proves nothing, the remote's main does (an answer removes the
    request in the same atomic push that marks its claim done). Unknown (offline): not now."""
    try:
        main = claims.remote.fetch_ref(main_ref(vault))
    except Unreachable:
        return False
    if main is None:
        return False
    blob = vault.git.blob_id(main, rel)
    return blob is not None and _request_blob(key) == blob[:20]


def adopt_request(claims: RefClaims | None, key: str | None) -> bool:
    """This machine answers again, after a restart, a request it had claimed as `key` (its daemon
    resumes every claimed request at start): its claim goes on being renewed. Left an orphan, it
    was dropped at the next round and never renewed: once expired another machine took the
    request over and answered it as well, and this machine's answer went up without its claim.
    Adopted, it is renewed until the answer is on main, and a claim lost anyway withdraws this
    machine's answer (the sync round). False: no key or no remote, or no such claim held here."""
    if key is None or claims is None:
        return False
    return claims.adopt(key)


def claim_lost(claims: RefClaims | None, key: str | None) -> bool:
    """Has this machine lost the claim `key` of a request that came through git (this process does
    not hold it: taken over while this machine was cut off or too slow to renew it)? Then the
    machine that took it over answers it, and this one must not: its answer, committed anyway,
    goes up beside the other one. No network."""
    if key is None or claims is None:
        return False
    held = claims.held.get(key)
    return held is None or held.orphan


def request_done(store: GitStore, key: str, head: str) -> bool:
    """A claimed request is done once main no longer holds it (its removal is committed with its result)."""
    blob = store.blob_id(head, f"inbox/{request_name(key)}")
    return blob is None or not blob.startswith(_request_blob(key))


def result_of(key: str) -> str | None:
    """The file that holds the result of a claimed piece of work (a cron run's output)."""
    parsed = parse_cron_key(key)
    if parsed is None:
        return None
    from .cron_runner import output_path

    return output_path(*parsed)


__all__ = ["INBOX_KEY", "URL_KEY", "adopt_request", "claim_lost", "claim_request", "cron_claims", "main_ref",
           "open_claims", "remote_for", "remote_url", "request_done", "request_key", "request_name", "result_of",
           "sync_dir"]
