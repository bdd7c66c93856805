"""Run every benchmark, then write bench/results.json and bench/results.md (figure, target,
measured, ratio to the baseline where there is one). Usage: python bench/run_all.py [--quick]

--quick shortens the long ones (fewer fault trials, a shorter stress run, no 100,000-file vault).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cron_lateness  # noqa: E402
import daemon_latency  # noqa: E402
import faults  # noqa: E402
import gateway  # noqa: E402
import prompt_overhead  # noqa: E402
import refine_overhead  # noqa: E402
import startup  # noqa: E402
import stress  # noqa: E402
import web  # noqa: E402


def rows(r: dict) -> list[tuple[str, str, str, str]]:
    s, p, ro, d, c, f, st = (r[k] for k in ("startup", "prompt_overhead", "refine_overhead", "daemon_latency",
                                           "cron_lateness", "faults", "stress"))
    out = [
        ("hermes-fs --help (median)", "< 0.3 s", f"{s['help_median_s']:.3f} s", ""),
        ("hermes-fs status, 10,000 files (median)", "< 0.3 s", f"{s['status_10k_median_s']:.3f} s", ""),
    ]
    base = {0: 46000, 150: 59000}
    for row in p["rows"]:
        if row.get("mcp_servers"):
            out.append((f"prompt + tool schemas, {row['skills']} skills + 2 MCP servers (time, fetch)", "",
                        f"{row['bytes']} B ({row['tokens']} tokens)", ""))
            continue
        target = "<= 8 KB" if row["skills"] == 0 else "<= 12 KB"
        ratio = f"{base[row['skills']] / row['bytes']:.1f}x smaller than hermes-agent 0.19" if row["skills"] in base else ""
        out.append((f"prompt + tool schemas, {row['skills']} skills", target, f"{row['bytes']} B ({row['tokens']} tokens)", ratio))
        if row["skills"]:
            out.append((f"skill routing, {row['skills']} skills", ">= 0.95", f"{row['routing']:.2f}", ""))
    rr = ro["rows"]
    for row in rr:
        out.append((f"refine minus model, {row['files']} files", "", f"{row['hermes_median_s']:.3f} s",
                    f"{row['speedup']:.0f}x faster than worktree ({row['worktree_median_s']:.1f} s)"))
    if "largest_vs_smallest" in ro:
        out.append(("refine: largest / smallest vault", "<= 1.5x", f"{ro['largest_vs_smallest']:.2f}x", ""))
    out += [
        ("daemon save -> commit beyond debounce, p95", "< 0.3 s", f"{d['save_to_commit_beyond_debounce_s']['p95']:.3f} s", ""),
        ("daemon inbox rename -> job start, p95", "< 0.3 s", f"{d['inbox_rename_to_job_start_s']['p95']:.3f} s", ""),
        ("idle daemon CPU over 60 s", "< 0.5%", f"{d['idle_cpu_percent_of_core']:.3f}%", ""),
        ("idle daemon RSS", "< 80 MB", f"{d['rss_mb']:.1f} MB", ""),
        ("cron start - due, p99", "< 1 s", f"{c['p99_s']:.3f} s", f"{60 / max(c['p99_s'], 1e-3):.0f}x under hermes-agent's 60 s tick"),
        (f"faults: corrupt repositories in {f['trials']} kill -9 trials", "0", str(f["corrupt_repositories"]), ""),
        ("faults: lost edits / double-run jobs / lost requests", "0 / 0 / 0",
         f"{f['lost_edits']} / {f['double_run_jobs']} / {f['requests_lost']}", ""),
        (f"stress: edits found / made ({st['seconds']:.0f} s, {st['vault_files']} files)", "all",
         f"{st['edits_found']} / {st['edits_made']}", ""),
        ("stress: fsck clean, locks free, stranded branches", "yes, yes, 0",
         f"{'yes' if st['fsck_clean'] else 'NO'}, {'yes' if st['locks_free'] else 'NO'}, {st['stranded_branches']}", ""),
    ]
    if "web" in r:
        w = r["web"]
        out += [
            ("web: pending page, 200 pending changes, server time (median)", "<= 300 ms",
             f"{w['pending_200']['median_s'] * 1000:.0f} ms", ""),
            ("web: change page, 1,000-entry memory file, server time (median)", "<= 300 ms",
             f"{w['change_1000_entries']['median_s'] * 1000:.0f} ms", ""),
            ("web: `hermes-fs web` start to first answer (median)", "<= 1 s", f"{w['start']['median_s']:.2f} s",
             "imports litellm" if w["start"]["imports_litellm"] else ""),
        ]
    g = r.get("gateway") or {}
    if "faults" in g:
        f = g["faults"]
        out += [
            ("gateway: Matrix message -> request durable, p95", "<= 1 s", f"{g['latency']['to_request_durable_s']['p95']:.3f} s", ""),
            ("gateway: Matrix message -> reply visible (scripted model), p95", "<= 2 s",
             f"{g['latency']['to_reply_visible_s']['p95']:.3f} s", ""),
            (f"gateway: {f['messages']} messages, {f['kills']} kill -9: lost / answered twice / replies sent twice",
             "0 / 0 / 0", f"{f['lost']} / {f['answered_twice']} / {f['replies_sent_twice']}", ""),
            ("gateway: idle daemon CPU, Matrix connected", "<= 0.5%", f"{g['idle_cpu_percent_of_core']:.3f}%", ""),
        ]
    if "email" in r:
        e, ef = r["email"]["latency"], r["email"]["faults"]
        out += [
            ("e-mail: SMTP accepted -> request committed, p95", "<= 2 s", f"{e['p95_s']:.3f} s",
             f"Dovecot's own IDLE notice: p95 {r['email']['idle_baseline']['p95_s']:.3f} s"),
            (f"e-mail: {ef['mails']} mails, {ef['kills']} kill -9, {ef['sent_while_down']} sent while down: "
             "lost / run twice / replies sent twice", "0 / 0 / 0",
             f"{ef['lost']} / {ef['run_twice']} / {ef['replies_sent_twice']}", ""),
        ]
    return out


def main(quick: bool = False) -> dict:
    results = {
        "startup": startup.main(),
        "prompt_overhead": prompt_overhead.main(),
        "refine_overhead": refine_overhead.main([100, 10_000] if quick else [100, 10_000, 100_000]),
        "daemon_latency": daemon_latency.main(),
        "cron_lateness": cron_lateness.main(),
        "faults": faults.main(12 if quick else 50),
        "stress": stress.main(60 if quick else 180),
        "web": web.main(quick),
        "gateway": gateway.main(quick),
    }
    import email_channel  # Dovecot from Debian (scripts/mail-test-env.sh); without it the rows are left out

    if not email_channel.dovecot_missing():
        results["email"] = email_channel.main(quick=quick)
    results["quick"] = quick
    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    mode = "`python bench/run_all.py --quick`" if quick else "`python bench/run_all.py`"
    table = [f"Made by {mode}.", "", "| figure | target | measured | ratio to baseline |", "|---|---|---|---|"]
    table += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(results)]
    (HERE / "results.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return results


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    if quick:
        import os

        os.environ["HERMES_BENCH_SUFFIX"] = ".quick"  # keep the full runs' per-benchmark files
    main(quick=quick)
