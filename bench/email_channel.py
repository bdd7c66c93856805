"""E-mail channel figures, against a real Dovecot + SMTP server (tests/mailenv.py) and the real
daemon (`hermes-fs daemon`, gateway.email in hermes.yaml) with a scripted model:

0. the idle daemon's CPU with the channel connected in IDLE, over 60 s;
1. mail accepted by SMTP -> request committed (the channel's record of the submit, written right
   after `Sink.submit` returned, i.e. after the request file was fsynced): p50 / p95 (target <= 2 s);
2. MAILS mails (100) with KILLS (5) random `kill -9` of the daemon and DOWN (20) of them sent while
   it was down: lost, run twice, replies sent twice (targets 0 / 0 / 0), and replies missing with
   the reason the ledger gives (a reply cut by a kill mid-send is marked failed, never resent).

The daemon checks senders as it would at Gmail: the MX in front verifies DKIM and stamps
`Authentication-Results: mx.test.example; dmarc=pass`, and hermes.yaml pins that authserv_id.
Usage: python bench/email_channel.py [MAILS] [--quick]

(Not bench/email.py: a module named `email` in bench/ would shadow the standard library's `email`
package for every script run from bench/, since Python puts the script's folder first on sys.path.)
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
import sys
import time
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path

from common import cpu_seconds, percentile, write_results  # noqa: E402
from harness import ModelServer, start_daemon, stop_daemon  # noqa: E402
from mailenv import AUTHSERV, PASSWORD, DkimKey, MailEnv, dovecot_missing  # noqa: E402

from hermes_fs.store.vault import init_vault  # noqa: E402

AGENT = "agent@test.example"
ME = "me@people.example"
TOKEN = re.compile(r"mail-(\d+)-token")


def responder(body: dict) -> dict:
    last = next((m for m in reversed(body["messages"]) if m["role"] == "user"), {"content": ""})
    content = last["content"] if isinstance(last["content"], str) else json.dumps(last["content"])
    m = TOKEN.search(content)
    return {"delay": 0.05, "content": f"answer to mail-{m.group(1) if m else 'x'}-token"}


def configure(root: Path, server: ModelServer, env: MailEnv) -> None:
    (root / "hermes.yaml").write_text(f"""model: openai/test-model
api_base: {server.api_base}
api_key_env: HERMES_TEST_KEY
sandbox:
  backend: none
refine:
  every_turns: 0
gateway:
  sender_rate_per_min: 100000
  commit_idle_s: 1
  retry_base_s: 0.2
  email:
    imap: {{host: 127.0.0.1, port: {env.imap_port}, tls: false, user: {AGENT}, password_env: MAIL_PASSWORD}}
    smtp: {{host: 127.0.0.1, port: {env.smtp_port}, starttls: false, from: {AGENT}}}
    allow: [{ME}]
    admins: [{ME}]
    authserv_id: {AUTHSERV}
""")
    (root / ".hermes").mkdir(exist_ok=True)
    (root / ".hermes" / "secrets.env").write_text(f"MAIL_PASSWORD={PASSWORD}\n")
    import subprocess

    subprocess.run(["git", "-C", str(root), "add", "hermes.yaml"], check=True)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "bench config"], check=True)


def state_db(root: Path) -> Path:
    return root / ".hermes" / "gateway" / "email.sqlite"


def outcome(root: Path, message_id: str) -> tuple[str, float] | None:
    try:
        db = sqlite3.connect(f"file:{state_db(root)}?mode=ro", uri=True, timeout=5)
        try:
            row = db.execute("SELECT outcome, at FROM mail WHERE message_id=?", (message_id,)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return (row[0], row[1]) if row and row[0] != "pending" else None


def wait_cursor(root: Path, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            db = sqlite3.connect(f"file:{state_db(root)}?mode=ro", uri=True, timeout=5)
            try:
                if db.execute("SELECT count(*) FROM cursor").fetchone()[0]:
                    return
            finally:
                db.close()
        except sqlite3.Error:
            pass
        time.sleep(0.1)
    raise RuntimeError("the e-mail channel did not connect")


def make_mail(key: DkimKey, i: int) -> tuple[str, bytes]:
    m = EmailMessage()
    m["From"], m["To"], m["Subject"] = ME, AGENT, f"question {i}"
    m["Date"], m["Message-ID"] = formatdate(), make_msgid(domain="people.example")
    m.set_content(f"Please answer mail-{i}-token.")
    return m["Message-ID"], key.sign(m.as_bytes())


def idle_baseline(env: MailEnv, key: DkimKey, n: int) -> dict:
    """The server's own part: SMTP accepted -> EXISTS on a bare imap-tools IDLE connection (Dovecot
    batches change notifications for about half a second)."""
    out = []
    with env.mailbox(ME) as box:
        for _ in range(n):
            box.idle.start()
            m = EmailMessage()
            m["From"], m["To"], m["Subject"], m["Message-ID"] = AGENT, ME, "probe", make_msgid()
            m.set_content("probe")
            env.send(m.as_bytes(), AGENT, [ME])
            accepted = time.time()
            while not box.idle.poll(timeout=5):
                pass
            out.append(time.time() - accepted)
            box.idle.stop()
    return {"n": n, "p50_s": round(percentile(out, 50), 4), "p95_s": round(percentile(out, 95), 4)}


def latency(root: Path, env: MailEnv, key: DkimKey, n: int, idle_s: float) -> dict:
    proc = start_daemon(root)
    try:
        wait_cursor(root)
        time.sleep(3)  # settle after start
        c0, t0 = cpu_seconds(proc.pid), time.time()
        time.sleep(idle_s)
        idle_cpu = 100 * (cpu_seconds(proc.pid) - c0) / (time.time() - t0)
        out = []
        for i in range(n):
            mid, raw = make_mail(key, 10_000 + i)
            env.send(raw, ME, [AGENT])
            accepted = time.time()
            deadline = accepted + 30
            while (got := outcome(root, mid)) is None and time.time() < deadline:
                time.sleep(0.01)
            if got is None:
                raise RuntimeError(f"mail {i} was never submitted")
            out.append(got[1] - accepted)
            time.sleep(0.2)
    finally:
        stop_daemon(proc)
    return {"n": n, "p50_s": round(percentile(out, 50), 4), "p95_s": round(percentile(out, 95), 4),
            "max_s": round(max(out), 4), "idle_s": idle_s, "idle_cpu_percent_of_core": round(idle_cpu, 3)}


def faults(root: Path, env: MailEnv, key: DkimKey, server: ModelServer, total: int, kills: int, down_each: int,
           seed: int = 11) -> dict:
    rng = random.Random(seed)
    ids: dict[int, str] = {}
    sent_down = 0
    kill_at = sorted(rng.sample(range(5, total - down_each * kills), kills))
    server.requests.clear()
    proc = start_daemon(root)
    wait_cursor(root)
    i = 0
    while i < total:
        if kill_at and i >= kill_at[0]:
            kill_at.pop(0)
            time.sleep(rng.uniform(0.0, 0.6))
            stop_daemon(proc, sig=9)
            for _ in range(down_each):  # sent while the daemon is down
                ids[i], raw = make_mail(key, i)
                env.send(raw, ME, [AGENT])
                i += 1
                sent_down += 1
            proc = start_daemon(root)
            continue
        ids[i], raw = make_mail(key, i)
        env.send(raw, ME, [AGENT])
        i += 1
        time.sleep(rng.uniform(0.0, 0.15))
    # let it finish: every mail handled and every reply settled
    deadline = time.time() + 300
    while time.time() < deadline and any(outcome(root, mid) is None for mid in ids.values()):
        time.sleep(0.5)
    wanted = set(ids.values())
    deadline = time.time() + 180
    while True:
        replies = [r for r in env.wait_for(ME, 0) if r.obj["In-Reply-To"] in wanted]
        if len({r.obj["In-Reply-To"] for r in replies}) >= total or time.time() > deadline:
            break
        time.sleep(1)
    time.sleep(3)  # a reply sent twice would show up now
    replies = [r for r in env.wait_for(ME, 0) if r.obj["In-Reply-To"] in wanted]
    stop_daemon(proc)
    by_parent: dict[str, int] = {}
    for r in replies:
        parent = r.obj["In-Reply-To"]
        by_parent[parent] = by_parent.get(parent, 0) + 1
    runs: dict[int, int] = {}
    for req in server.requests:
        last = next((m for m in reversed(req.get("messages", [])) if m["role"] == "user"), None)
        m = TOKEN.search(str(last.get("content") if last else ""))
        if m:
            runs[int(m.group(1))] = runs.get(int(m.group(1)), 0) + 1
    lost = [n for n, mid in ids.items() if not (outcome(root, mid) or ("", 0))[0].startswith("submitted")]
    run_twice = [n for n, c in runs.items() if c > 1 and n in ids]
    not_run = [n for n in ids if runs.get(n, 0) == 0]
    replies_twice = [n for n, mid in ids.items() if by_parent.get(mid, 0) > 1]
    missing = [n for n, mid in ids.items() if by_parent.get(mid, 0) == 0]
    reasons = failed_reasons(root)
    return {"vault": str(root), "mails": total, "kills": kills, "sent_while_down": sent_down, "lost": len(lost),
            "not_run": len(not_run), "run_twice": len(run_twice), "replies_sent_twice": len(replies_twice),
            "replies_missing": len(missing), "failed_delivery_reasons": reasons}


def failed_reasons(root: Path) -> list[str]:
    path = root / ".hermes" / "gateway" / "gateway.db"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if "deliveries" not in tables:
            return []
        return [r[0] for r in db.execute("SELECT reason FROM deliveries WHERE state='failed'")]
    except sqlite3.Error:
        return []
    finally:
        db.close()


def main(total: int = 100, quick: bool = False) -> dict:
    if dovecot_missing():
        raise SystemExit(dovecot_missing())
    env = MailEnv([AGENT, ME]).start()
    key = DkimKey.make("people.example")
    env.zone.add(key)
    server = ModelServer(responder=responder)
    try:
        import tempfile

        root = init_vault(Path(tempfile.mkdtemp()) / "vault").vault.root
        configure(root, server, env)
        base = idle_baseline(env, key, 5 if quick else 20)
        print(f"baseline, SMTP accepted -> IDLE EXISTS on a bare client: p50 {base['p50_s']:.3f} s, "
              f"p95 {base['p95_s']:.3f} s (n={base['n']})")
        lat = latency(root, env, key, 10 if quick else 40, 10 if quick else 60)
        print(f"idle daemon with the e-mail channel in IDLE: {lat['idle_cpu_percent_of_core']:.3f}% of a core "
              f"over {lat['idle_s']:.0f} s")
        print(f"SMTP accepted -> request committed: p50 {lat['p50_s']:.3f} s, p95 {lat['p95_s']:.3f} s "
              f"(n={lat['n']}, target p95 <= 2 s)")
        f = faults(root, env, key, server, 30 if quick else total, 2 if quick else 5, 4)
        print(f"{f['mails']} mails, {f['kills']} kill -9, {f['sent_while_down']} sent while down: lost {f['lost']}, "
              f"run twice {f['run_twice']}, replies sent twice {f['replies_sent_twice']}, "
              f"not run {f['not_run']}, replies missing {f['replies_missing']} {f['failed_delivery_reasons']}")
        data = {"idle_baseline": base, "latency": lat, "faults": f}
        write_results("email", data)
        return data
    finally:
        env.stop()


if __name__ == "__main__":
    if "--quick" in sys.argv:
        import os

        os.environ.setdefault("HERMES_BENCH_SUFFIX", ".quick")  # keep the full run's results file
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 100, "--quick" in sys.argv)
