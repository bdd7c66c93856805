"""`hermes-fs skills`: list, show, validate and embed the skills of the vault; install and update
skills from a git repository (as an install/ branch to review: `learning.install`)."""

from __future__ import annotations

import click

from .context import vault_for
from .curate import print_usage, skills_restore
from .options import vault_option
from .term import echo, emit_json, shorten


@click.group()
def skills():
    """List, show and validate skills."""


@skills.command("list")
@vault_option
@click.option("--json", "as_json", is_flag=True)
@click.option("--usage", is_flag=True, help="Uses, last used, created by, age and staleness (from the sessions).")
@click.pass_context
def skills_list(ctx: click.Context, as_json: bool, usage: bool):
    """Each skill with its description (--usage: how it is used)."""
    from ..mind import skills as sk

    if usage:
        rows = print_usage(vault_for(ctx), as_json)
        if as_json:
            emit_json(rows)
        return
    loaded, errors = sk.load_all(vault_for(ctx).files)
    if as_json:
        emit_json([{"name": s.name, "description": s.description, "files": s.files} for s in loaded])
    else:
        for s in loaded:
            echo(f"{s.name:<32} {shorten(' '.join(s.description.split()), 90)}")
    for e in errors:
        echo(f"error: {e}", err=True)
    if errors:
        ctx.exit(1)


@skills.command("show")
@vault_option
@click.argument("name")
@click.argument("file", required=False)
@click.pass_context
def skills_show(ctx: click.Context, name: str, file: str | None):
    """Print SKILL.md, or one of its support files."""
    from ..mind import skills as sk

    echo(sk.view(vault_for(ctx).files, name, file), nl=False)


@skills.command("validate", short_help="Check skills against the Agent Skills reference validator.")
@vault_option
@click.argument("names", nargs=-1)
@click.option("--fix", is_flag=True, help="Rewrite skills to the reference form (one commit).")
@click.pass_context
def skills_validate(ctx: click.Context, names: tuple[str, ...], fix: bool):
    """Check skills against the Agent Skills reference validator (all by default): one line per
    problem, then a summary. --fix rewrites them to the reference form, as one commit."""
    from .. import Act
    from ..mind import skills as sk

    v = vault_for(ctx)
    if fix:
        changes, skipped = sk.fixes(v.files)
        for rel, data in changes.items():
            v.files.write(rel, data) if data is not None else v.files.delete(rel)
        sha = v.git.commit_paths(sorted(changes), f"skills: {len({p.split('/')[1] for p, d in changes.items() if d})} "
                                                  "skill(s) to the reference form", Act.person()) if changes else None
        for line in skipped:
            echo(f"not fixed: {line}")
        echo(f"fixed {len({p.split('/')[1] for p, d in changes.items() if d})} skill(s)"
             + (f" in {sha[:10]}" if sha else "") + (f"; {len(skipped)} left as they were" if skipped else ""))
    report = sk.check_all(v.files, list(names) or None)
    for name, errors in sorted(report.problems.items()):
        for e in errors:
            echo(f"BAD {name}: {e}")
    for path, category, new in report.misplaced:
        echo(f"MISPLACED {path}: skills live at skills/<name>/SKILL.md; --fix moves it to skills/{new}/"
             + (f" (category {category!r} kept as metadata.category)" if category else ""))
    echo(f"{report.checked} skill(s) checked: {report.checked - report.invalid} valid, {report.invalid} invalid, "
         f"{len(report.misplaced)} misplaced")
    if report.invalid or report.misplaced:
        ctx.exit(2)


@skills.command("embed", short_help="Build or refresh the skill vectors of skills.embeddings now.")
@vault_option
@click.option("--background", is_flag=True, hidden=True, help="At low priority (started by a CLI turn).")
@click.option("--table", is_flag=True, hidden=True, help="Only the static token table (the daemon's child process).")
@click.option("--install-table", is_flag=True,
              help="Only the installation's static token table, for every vault (make install runs this).")
@click.pass_context
def skills_embed(ctx: click.Context, background: bool, table: bool, install_table: bool):
    """Build or refresh the skill vectors of skills.embeddings: the static token table (once, about
    a minute; `make install` builds it for the installation), the static vectors, and the model's.
    The daemon does this in the background, and a CLI turn without a daemon starts it detached; no
    turn waits for it (a turn encodes skills without static vectors itself, from the table)."""
    import os
    import time

    from ..mind import embeddings, static_vectors
    from ..mind.search import fill_vectors, vectors_missing

    if install_table:
        if not embeddings.available():
            echo(f"no embedding model installed ({embeddings.EXTRA}): skills are ranked by full-text")
            return
        t0 = time.monotonic()
        path = static_vectors.install()
        echo(f"static token table at {path} ({time.monotonic() - t0:.1f} s)")
        return
    v = vault_for(ctx)
    if background:
        os.nice(10)  # the turn that started it, and the next ones, come first
    if not embeddings.available():
        raise embeddings.EmbeddingsUnavailable(f"the embedding model is not installed: {embeddings.EXTRA}")
    t0 = time.monotonic()
    if table:
        static_vectors.build(v.state_dir)
        echo(f"static token table built in {time.monotonic() - t0:.1f} s")
        return
    # a turn's background fill makes what that process ranks by; asked by hand, everything
    model = not background or embeddings.mode(v.config.skills.embeddings) == "model"
    done = fill_vectors(v.root, model=model)
    if done is None:
        echo("another process is building the skill vectors")
        return
    echo(f"encoded {done} skill(s) in {time.monotonic() - t0:.1f} s; {vectors_missing(v.root, model=model)} without vectors")


@skills.command("install", short_help="Skills from a git repository, as a branch to review.")
@vault_option
@click.argument("url")
@click.option("--ref", help="A branch, tag or commit (default: the repository's HEAD).")
@click.option("--path", "folder", help="Only the skills under this folder of the repository.")
@click.pass_context
def skills_install(ctx: click.Context, url: str, ref: str | None, folder: str | None):
    """Copy the skills of a git repository (every folder with a SKILL.md, or those under --path)
    onto an install/<stamp>-<name> branch; nothing reaches main until `hermes-fs review merge`.
    Symlinks, nested repositories, big files and names that leave the skill are left out."""
    from .. import install_skills
    from ..learning.install import Source

    _report([install_skills(vault_for(ctx), Source(url, ref, folder))])


@skills.command("update", short_help="Propose what changed at the installed skills' source.")
@vault_option
@click.argument("names", nargs=-1)
@click.pass_context
def skills_update(ctx: click.Context, names: tuple[str, ...]):
    """Fetch again the source each installed skill came from (its Skill-Source) and propose what
    changed there as a new install/ branch to review (all installed skills, or NAMES)."""
    from .. import update_skills

    _report(update_skills(vault_for(ctx), list(names) or None))


def _report(results) -> None:
    for result in results:
        for line in result.lines():
            echo(line)


skills.add_command(skills_restore)
