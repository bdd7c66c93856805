import json
import subprocess
import sys

from hermes_fs.store.provenance import Act


def test_help_and_status_do_not_import_litellm_or_docker(vault):
    code = (
        "import sys; from hermes_fs.cli.main import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit: pass\n"
        "heavy = [m for m in ('litellm', 'docker', 'apprise', 'openai') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    for args in (["--help"], ["--vault", str(vault.root), "status"], ["--vault", str(vault.root), "status", "--json"]):
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
        assert "HEAVY []" in r.stderr, (args, r.stderr)


def test_status_json(vault, run_cli):
    r = run_cli("status", "--json", "--vault", str(vault.root))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert {m["file"] for m in data["memory"]} == {"memory/USER.md", "memory/MEMORY.md"}
    assert data["skills"]["count"] == 2
    assert data["cron"][0]["job"] == "morning-brief" and data["cron"][0]["next_run"] is None
    assert data["pending_reviews"] == [] and data["daemon"]["running"] is False


def test_status_flags_over_budget_and_bad_files(vault, run_cli):
    (vault.root / "memory" / "USER.md").write_text("---\ntitle: U\nbudget: 10\n---\n- a long entry here\n")
    (vault.root / "cron" / "bad.md").write_text("---\nschedule: nope\n---\nx\n")
    r = run_cli("--vault", str(vault.root), "status")
    assert r.returncode == 0
    assert "OVER BUDGET" in r.stdout and "cron/bad.md" in r.stdout and "bad schedule" in r.stdout


def test_bad_config_exit_2_names_file_and_key(vault, run_cli):
    (vault.root / "hermes.yaml").write_text("model: x\nrefine:\n  polcy: auto\n")
    r = run_cli("--vault", str(vault.root), "status")
    assert r.returncode == 2
    assert r.stderr.strip().startswith("error: ") and "hermes.yaml:3" in r.stderr and "refine.polcy" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_no_vault_is_exit_2(tmp_path, run_cli):
    r = run_cli("status", cwd=tmp_path, env={"HERMES_VAULT": ""})
    assert r.returncode == 2 and "no vault found" in r.stderr


def test_init_twice_and_nonempty(tmp_path, run_cli):
    assert run_cli("init", str(tmp_path / "v")).returncode == 0
    r = run_cli("init", str(tmp_path / "v"))
    assert r.returncode == 2 and "already a hermes-fs vault" in r.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "memory").write_text("x")  # where the vault needs a folder: refused
    assert run_cli("init", str(tmp_path / "full")).returncode == 2
    (tmp_path / "full" / "memory").unlink()
    (tmp_path / "full" / "x").write_text("x")  # any other folder with files is adopted
    assert run_cli("init", str(tmp_path / "full")).returncode == 0 and (tmp_path / "full" / "x").read_text() == "x"


def test_memory_and_skills_commands(vault, run_cli):
    v = ["--vault", str(vault.root)]
    r = run_cli(*v, "memory", "show")
    assert "memory/USER.md" in r.stdout and " entr" in r.stdout
    r = run_cli(*v, "memory", "show", "USER.md")
    assert r.stdout == (vault.root / "memory" / "USER.md").read_text()
    r = run_cli(*v, "skills", "list")
    assert "writing-skills" in r.stdout and "reviewing-learned-changes" in r.stdout
    assert run_cli(*v, "skills", "validate").returncode == 0
    assert "# Writing a good skill" in run_cli(*v, "skills", "show", "writing-skills").stdout
    bad = vault.root / "skills" / "mismatch"
    bad.mkdir()
    (bad / "SKILL.md").write_text("---\nname: other\ndescription: d\n---\nx\n")
    r = run_cli(*v, "skills", "validate")
    assert r.returncode == 2 and "BAD mismatch" in r.stdout and "must match skill name" in r.stdout
    r = run_cli(*v, "skills", "show", "nope")
    assert r.returncode == 2 and "no skill named 'nope'" in r.stderr


def test_notify_test_command(vault, receiver, run_cli):
    (vault.root / "hermes.yaml").write_text("notify:\n  targets: {desk: '${DESK_URL}'}\n")
    (vault.root / ".hermes" / "secrets.env").write_text("DESK_URL=\n")  # listed; the environment gives the value
    r = run_cli("--vault", str(vault.root), "notify", "test", env={"DESK_URL": receiver.url("desk")})
    assert r.returncode == 0 and "desk: ok" in r.stdout
    assert receiver.received[0]["body"]["title"] == "hermes-fs test"
    r = run_cli("--vault", str(vault.root), "notify", "test", "phone")
    assert r.returncode == 2 and "unknown notify target 'phone'" in r.stderr
    r = run_cli("--vault", str(vault.root), "notify", "test", env={"DESK_URL": "json://127.0.0.1:9/x"})
    assert r.returncode == 1 and "desk: error" in r.stdout


def test_log_lists_learned_changes(vault, run_cli):
    assert "no learned changes yet" in run_cli("--vault", str(vault.root), "log").stdout
    s = vault.git.head()
    old = vault.git.read_file(s, "memory/USER.md")
    vault.git.commit_overlay(s, "refine/20261130-a", {"memory/USER.md": old + b"- a\n"}, "add a", Act.learned())
    vault.git.merge("refine/20261130-a", "merge refine/20261130-a: add a", Act.person())
    vault.git.commit_overlay(vault.git.head(), "refine/20261130-b", {"memory/USER.md": old + b"- a\n- b\n"}, "add b", Act.learned())
    vault.git.commit_overlay(vault.git.head(), "learn/20261130-c", {"memory/MEMORY.md": b"- c\n"}, "add c", Act.learned())
    vault.git.reject("learn/20261130-c")
    r = run_cli("--vault", str(vault.root), "log", "--json")
    states = {c["branch"]: c["state"] for c in json.loads(r.stdout)}
    assert states == {"refine/20261130-a": "merged", "refine/20261130-b": "pending", "learn/20261130-c": "rejected"}


def test_the_installed_console_script_runs(tmp_path):
    """`hermes-fs` on PATH (the entry point in pyproject), not only `python -m hermes_fs`."""
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("hermes-fs")
    assert exe.exists(), "the package is not installed with its console script"
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and "review" in r.stdout


def test_no_help_line_is_cut_mid_sentence():
    """Every command listed in a group's --help shows a whole short help, never one click cut
    with "..." (a command's short_help, or a first sentence that fits)."""
    import click
    from click.testing import CliRunner

    from hermes_fs.cli.main import main

    def groups(cmd, path):
        if isinstance(cmd, click.Group):
            yield path
            for name, sub in cmd.commands.items():
                yield from groups(sub, [*path, name])

    cut = []
    for path in groups(main, []):
        out = CliRunner().invoke(main, [*path, "--help"], prog_name="hermes-fs").output
        listing = out.split("Commands:", 1)[1] if "Commands:" in out else ""
        cut += [f"{' '.join(path)}: {line.strip()}" for line in listing.splitlines() if line.rstrip().endswith("...")]
    assert cut == []


def test_help_lists_every_command_without_importing_them():
    """The root `--help` reads the registry, not the command modules; the registry's line for each
    command is the command's own short help, so the two cannot drift apart."""
    import click

    from hermes_fs.cli.main import COMMANDS, main

    code = ("import sys; from hermes_fs.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit: pass\n"
            "print('LOADED', sorted(m for m in sys.modules if m.startswith('hermes_fs.cli.') and m != 'hermes_fs.cli.main'),"
            " file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "LOADED []" in r.stderr, r.stderr
    listed = {line.split()[0] for line in r.stdout.split("Commands:", 1)[1].splitlines() if line.strip()}
    assert listed == set(COMMANDS)
    ctx = click.Context(main)
    for name, entry in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
        assert entry.short_help == command.get_short_help_str(200), name
    assert main.get_command(ctx, "no-such-command") is None
