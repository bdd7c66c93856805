"""Deciding on learned changes: list, show, merge (whole or in part), reject, revert, and `log`.

A learned change is one commit on `refine/...` or `learn/...`; merged ones are `merge <branch>:`
commits (trailers `Hermes-Change: merge`, `Hermes-Branch`) anywhere in main's history, on every
parent: a merge made on another machine arrives on a sync merge's second parent (reverted ones
have a `revert <branch>` commit after them);
rejected ones live under refs/hermes/rejected/. Merges and reverts use the format-aware merge of
`mind.merge`, so two learned entries added to the same file, or a learned entry beside a person's
note, never conflict. The person's decisions (merge, reject, revert) are authored by the person;
a merge made by policy is authored by the agent.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from ..errors import ConflictError, GitError, InputError, NotFound
from ..mind.merge import resolver
from ..store.git import GitStore, format_message, parse_trailers
from ..store.provenance import BRANCH, CHANGE, CHECKS, Act

LEARNED_PREFIXES = ("refine/", "learn/", "curate/", "install/")  # install/: skills from a repository
MERGE_GREP = r"^merge (refine|learn|curate|install)/"
REVERT_GREP = r"^revert (refine|learn|curate|install)/"


@dataclass
class LearnedChange:
    branch: str
    state: str  # merged | pending | rejected | reverted
    timestamp: int
    summary: str
    sha: str


@dataclass
class Pending:
    branch: str
    age_s: int
    files: list[str]
    summary: str
    checks: str = ""  # the person's checks on it, as its Checks trailer says ("1/2 passed; failed: x")


def format_resolver(store: GitStore):
    return resolver(store.merge_text)


def _history(store: GitStore, grep: str):
    """Commits matching `grep` on every parent of main, all of them (no first-parent, no cap)."""
    return store.log(grep=grep, first_parent=False, limit=0)


def learned_log(store: GitStore) -> list[LearnedChange]:
    """Merged, reverted, pending and rejected learned changes, newest first."""
    reverted = {c.trailers.get(BRANCH) or c.summary.removeprefix("revert ")
                for c in _history(store, REVERT_GREP)}
    changes = []
    for c in _history(store, MERGE_GREP):
        branch, _, summary = c.summary.removeprefix("merge ").partition(": ")
        branch = c.trailers.get(BRANCH) or branch
        changes.append(LearnedChange(branch, "reverted" if branch in reverted else "merged", c.timestamp, summary, c.sha))
    for prefix in LEARNED_PREFIXES:
        changes += [LearnedChange(b.name, "pending", b.timestamp, b.summary, b.sha) for b in store.branches(prefix)]
    changes += [LearnedChange(b.name, "rejected", b.timestamp, b.summary, b.sha) for b in store.rejected()]
    return sorted(changes, key=lambda c: c.timestamp, reverse=True)


def resolve_name(store: GitStore, name: str, include_decided: bool = False) -> str:
    """A full branch name from a full name, a unique prefix, or a unique slug part."""
    if name.startswith(LEARNED_PREFIXES) and store.rev(f"refs/heads/{name}"):
        return name
    names = [c.branch for c in learned_log(store) if include_decided or c.state == "pending"]
    if name in names:
        return name
    exact = sorted({n for n in names if n.split("/", 1)[-1].split("-", 2)[-1] == name})  # the whole slug
    if len(exact) == 1:
        return exact[0]
    hits = sorted({n for n in names if n.startswith(name) or name in n.split("/", 1)[-1]})
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise InputError(f"{name!r} matches several changes: {', '.join(hits[:5])}")
    if not name.startswith(LEARNED_PREFIXES):
        raise InputError(f"{name!r} is not a learned change (refine/..., learn/..., curate/... or install/...) nor a unique part of one's name; "
                         "see `hermes-fs review` or `hermes-fs log`")
    raise NotFound(f"no pending change {name!r}; see `hermes-fs review` or `hermes-fs log`")


def _check_branch(store: GitStore, branch: str) -> str:
    if not branch.startswith(LEARNED_PREFIXES):
        raise InputError(f"{branch!r} is not a learned change (refine/..., learn/..., curate/... or install/...); see `hermes-fs review`")
    sha = store.rev(f"refs/heads/{branch}")
    if not sha:
        raise NotFound(f"no pending change {branch!r}; see `hermes-fs review` or `hermes-fs log`")
    return sha


def pending(store: GitStore) -> list[Pending]:
    now = int(time.time())
    tips = store.branches(*LEARNED_PREFIXES)
    paths = store.changed_paths_of([b.sha for b in tips])  # one git call for all of them
    rows = [Pending(b.name, now - b.timestamp, paths.get(b.sha, []), b.summary,
                    store.commit_info(b.sha).trailers.get(CHECKS, "")) for b in tips]
    return sorted(rows, key=lambda p: p.age_s)


def show(store: GitStore, branch: str, color: bool = False) -> str:
    """A pending change: its message, what merging it would do to main *now* (or why it would
    conflict), and its own diff. A merged, reverted or rejected change: its message and diff."""
    decided = {c.branch: c for c in learned_log(store) if c.state != "pending"}
    sha = store.rev(f"refs/heads/{branch}") if branch.startswith(LEARNED_PREFIXES) else None
    if not sha:
        if branch not in decided:
            _check_branch(store, branch)  # raises the usual message
        c = decided[branch]
        tip = c.sha if c.state == "rejected" else store.commit_info(c.sha).parents[1]
        info = store.commit_info(tip)
        return (f"{branch} ({c.state})\n{info.summary}\n\n{info.body}\n\n"
                + store.diff(info.parents[0], tip, color=color))
    info = store.commit_info(sha)
    header = f"{branch} (pending)\n{info.summary}\n\n{info.body}\n\n"
    main = store.head()
    try:
        tree = store.merged_tree(main, sha, format_resolver(store))
    except ConflictError as exc:
        preview = "Merging now would CONFLICT:\n" + "\n".join(exc.details or exc.files) + "\n" + next_steps(branch, exc.files)
        return header + preview + "\n\nThe change itself:\n" + store.diff(info.parents[0], sha, color=color)
    now = store.diff(main, tree, color=color)
    return header + "What merging it would do to main now:\n" + (now or "(nothing: main already has it)\n")


def next_steps(branch: str, files: list[str]) -> str:
    skip = " ".join(f"--skip {f}" for f in files)
    return (f"Next: `hermes-fs review merge {branch} {skip}` to accept the rest (the skipped part stays pending), "
            f"`hermes-fs review reject {branch}`, or edit those files on main and merge again.")


def merge(store: GitStore, branch: str, act: Act | None = None, only: list[str] | None = None,
          skip: list[str] | None = None) -> str:
    """Accept a pending change, or the part of it `only`/`skip` selects; what is left out stays
    pending under the same name as a smaller change. A conflict raises ConflictError naming the
    file and the entry; then nothing changed."""
    sha = _check_branch(store, branch)
    info = store.commit_info(sha)
    paths = store.changed_paths(info.parents[0], sha)
    chosen = _select(paths, only, skip)
    if chosen == paths:
        return _merge_whole(store, branch, info.summary, act)
    if not chosen:
        raise InputError(f"--only/--skip leave nothing of {branch} to merge (it changes {', '.join(paths)})")
    rest = [p for p in paths if p not in chosen]
    # Both parts stay the agent's work (blame must not show the person as author of a learned
    # entry), and each message names only the files that commit holds.
    message = store.message(sha)
    part = store.derive(info.parents[0], {p: store.read_file(sha, p) for p in chosen},
                        part_message(message, chosen, paths, f"the rest ({', '.join(rest)}) stays pending as {branch}"),
                        act=Act.learned())
    rest_commit = store.derive(info.parents[0], {p: store.read_file(sha, p) for p in rest},
                               part_message(message, rest, paths, f"{', '.join(chosen)} merged on its own"),
                               act=Act.learned())
    if not (part and rest_commit):
        raise GitError(f"{branch}: splitting it into {chosen} and {rest} left an empty part")
    store.move_ref(f"refs/heads/{branch}", part, sha)
    try:
        merged = _merge_whole(store, branch, part_summary(info.summary, chosen, paths), act)
    except Exception:
        store.move_ref(f"refs/heads/{branch}", sha, part)  # nothing changed: the whole change is pending again
        raise
    store.move_ref(f"refs/heads/{branch}", rest_commit, None)  # the rest stays pending
    return merged


def part_summary(summary: str, kept: list[str], paths: list[str]) -> str:
    """The summary of the part of a change holding `kept`: a summary made from the file list is
    made again from the kept files; a written one gets the kept files added."""
    if summary == "update " + ", ".join(sorted(paths)):
        return "update " + ", ".join(kept)
    return f"{summary} (part: {', '.join(kept)})"


def part_message(message: str, kept: list[str], paths: list[str], note: str) -> str:
    """The message of a change cut down to the files `kept`: the summary says it is a part, the
    body keeps the lines about kept files (and lines naming no file), drops lines about the others,
    and says where the rest went; trailers (the provenance) are kept as they are."""
    paragraphs = message.strip().split("\n\n")
    trailers = parse_trailers(message)
    summary, body = paragraphs[0].splitlines()[0], paragraphs[1:-1] if trailers else paragraphs[1:]
    others = [p for p in paths if p not in kept]

    def keep(line: str) -> bool:
        named = [p for p in paths if p in line]
        return not named or any(p in kept for p in named) or not any(p in others for p in named)

    lines = [line for paragraph in body for line in paragraph.splitlines() if keep(line)]
    lines.append(f"Part of a larger change: {note}.")
    return format_message(part_summary(summary, kept, paths), lines, trailers)


def merge_message(branch: str, summary: str) -> str:
    """`merge <branch>: <summary>` with the trailers `log` and `revert` find it by, on any parent."""
    return format_message(f"merge {branch}: {summary}", "", {CHANGE: "merge", BRANCH: branch})


def _merge_whole(store: GitStore, branch: str, summary: str, act: Act | None) -> str:
    message = merge_message(branch, summary)
    try:
        return store.merge(branch, message, act or Act.person(), resolve=format_resolver(store))
    except ConflictError as exc:
        raise ConflictError(_conflict_text(exc, branch), exc.files, exc.details) from None


def _conflict_text(exc: ConflictError, branch: str) -> str:
    text = "merge would conflict; nothing changed"
    if exc.details:
        text += ":\n" + "\n".join(exc.details)
    return text + "\n" + next_steps(branch, exc.files) + "\nconflicted files"


def _select(paths: list[str], only: list[str] | None, skip: list[str] | None) -> list[str]:
    def hit(path: str, patterns: list[str]) -> bool:
        return any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in patterns)

    for pattern in (only or []) + (skip or []):
        if not any(hit(p, [pattern]) for p in paths):
            raise InputError(f"{pattern!r} is not in this change (it changes {', '.join(paths)})")
    chosen = [p for p in paths if hit(p, only)] if only else list(paths)
    return [p for p in chosen if not hit(p, skip or [])]


def reject(store: GitStore, branch: str) -> str:
    _check_branch(store, branch)
    return store.reject(branch)


def merge_commit_of(store: GitStore, branch: str) -> str:
    hits = _history(store, f"^merge {re.escape(branch)}: ")
    if not hits:
        raise InputError(f"{branch!r} was never merged into main; see `hermes-fs log`")
    return hits[0].sha


def revert(store: GitStore, branch: str, act: Act | None = None, only: list[str] | None = None,
           skip: list[str] | None = None) -> str:
    """Undo a merged change, entry by entry, or the part of it `only`/`skip` selects (the rest stays
    merged, and can be reverted later); refuses (ConflictError naming the entry) only where a person
    changed the same entries since."""
    sha = merge_commit_of(store, branch)
    if any(c.summary == f"revert {branch}" for c in _history(store, REVERT_GREP)):
        raise GitError(f"{branch} was already reverted")
    paths = store.changed_paths(store.commit_info(sha).parents[0], sha)
    chosen = _select(paths, only, skip) if only or skip else paths
    if not chosen:
        raise InputError(f"--only/--skip leave nothing of {branch} to revert (it changed {', '.join(paths)})")
    whole = chosen == paths
    summary = f"revert {branch}" if whole else f"revert part of {branch}: {', '.join(chosen)}"
    message = format_message(summary, f"This reverts merge {sha}" + ("." if whole else f" for {', '.join(chosen)} only."),
                             {CHANGE: "revert", BRANCH: branch})
    try:
        return store.revert_merge(sha, message, act or Act.person(), resolve=format_resolver(store),
                                  paths=None if whole else chosen)
    except ConflictError as exc:
        details = ("\n" + "\n".join(exc.details)) if exc.details else ""
        raise ConflictError(f"cannot revert {branch}: a person has changed the same entries since{details}\n"
                            f"{revert_next_steps(branch, exc.files, chosen)}\nconflicted files",
                            exc.files, exc.details) from None


def reverted_part(store: GitStore, revert_sha: str) -> list[str] | None:
    """The files a partial revert undid (from its summary), or None for a whole revert."""
    summary = store.commit_info(revert_sha).summary
    head, sep, files = summary.partition(": ")
    return files.split(", ") if sep and head.startswith("revert part of ") else None


def revert_next_steps(branch: str, conflicted: list[str], chosen: list[str]) -> str:
    """What to do when a person's edit blocks a revert: undo the rest now, the edited file by hand."""
    rest = [p for p in chosen if p not in conflicted]
    if not rest:
        return (f"Next: edit {', '.join(conflicted)} by hand to undo it (your edits there are kept), "
                f"or see the change with `hermes-fs review show {branch}`.")
    skip = " ".join(f"--skip {f}" for f in conflicted)
    return (f"Next: `hermes-fs revert {branch} {skip}` to undo the rest (your edited files stay as they are), "
            f"then edit {', '.join(conflicted)} by hand; `hermes-fs review show {branch}` shows the change.")
