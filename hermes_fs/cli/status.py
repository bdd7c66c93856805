"""`hermes-fs status`: prints the overview that service/status.py collects (imported only when it runs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from .context import vault_for
from .options import vault_option
from .term import columns, echo, plural

if TYPE_CHECKING:
    from ..service.status import Status


@click.command()
@vault_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool):
    """Memory sizes vs budgets, skills, cron jobs, pending reviews, daemon state."""
    from ..service.status import collect

    st = collect(vault_for(ctx))
    echo(st.to_json() if as_json else render(st))


def render(st: Status) -> str:
    lines = [f"vault  {st.vault}", f"model  {st.model}", "", "memory"]
    for m in st.memory:
        flag = "  OVER BUDGET: refine will consolidate" if m["over_budget"] else ""
        lines.append(f"  {m['file']:<32} {m['chars']:>6} / {m['budget']:<6} chars  {plural(m['entries'], 'entry', 'entries')}{flag}")
    s = st.skills
    extra = [f"{s[k]} {k}" for k in ("invalid", "misplaced") if s.get(k)]
    lines.append(f"skills  {s.get('count', 0)}" + (f"  ({', '.join(extra)}: `hermes-fs skills validate`, then --fix)"
                                                   if extra else "")
                 + (f"  ({s['stale']} stale: `hermes-fs skills list --usage`, `hermes-fs curate`)" if s.get("stale") else ""))
    lines.append("cron")
    now = datetime.now(UTC)
    for line in columns([[j.job, j.schedule, "next: " + j.next_words(st.host, now)] for j in st.cron]):
        lines.append(f"  {line}")
    if not st.cron:
        lines.append("  (no jobs)")
    lines.append(f"pending reviews  {len(st.pending_reviews)}")
    for r in st.pending_reviews:
        lines.append(f"  {r['branch']}  {r['summary']}")
    d = st.daemon
    lines.append("daemon  " + (f"running (pid {d.get('pid')})" if d.get("running") else "not running"))
    if st.gateway:
        from .gateway import render_row

        lines.append("gateway")
        lines.extend(f"  {render_row(g)}" for g in st.gateway)
    if st.sync is not None:
        y = st.sync
        lines.append(f"sync  {y['remote'] or '(no url)'}  as host {y['host']}")
        for path in y["conflicts"]:
            lines.append(f"  conflict kept beside: {path} (merge it into the original, then delete it)")
        for job, due in y["missed"].items():
            lines.append(f"  missed while offline: {job} due {due} (runs here if nobody ran it, once the remote answers)")
        changed = y.get("settings_changed") or {}
        if changed.get("changed"):
            lines.append(f"  settings changed by {changed.get('host')}: {', '.join(changed['changed'])}")
        for h in y.get("held_settings") or []:
            lines.append(f"  held until approved here: {h['key']} = {h['offered']} (from {h['from']}; in force: "
                         f"{h['in_force']}); `hermes-fs sync approve {h['key']}`")
        for path in y.get("quarantined") or []:
            lines.append(f"  quarantined (in git, never written here): {path!r}")
    for e in st.errors:
        lines.append(f"error  {e}")
    for f in st.failed_requests:
        where = ", ".join(w for w in (f.source if f.source != f.request else "", f.finished) if w)
        lines.append(f"failed request  {f.request or f.name}{f' ({where})' if where else ''}: {f.answer}; "
                     f"`outputs/requests/{f.name}.md`")
    return "\n".join(lines)
