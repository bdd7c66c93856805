"""The package's public API (issue 21 item 17): a small `__all__`, loaded lazily, that the CLI and
the MCP server consume; a docstring that names only what exists; architecture notes in the repo."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import hermes_fs

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "hermes_fs"


def test_every_public_name_resolves_and_nothing_else_is_promised():
    for name in hermes_fs.__all__:
        assert getattr(hermes_fs, name) is not None, name
    assert set(hermes_fs.__all__) - {"__version__"} == set(hermes_fs._LAZY) | {
        "HermesError", "InputError", "ConflictError", "GitError", "SecretError"}
    assert hermes_fs.open_vault.__module__ == "hermes_fs.store.vault"
    assert callable(hermes_fs.review.merge) and callable(hermes_fs.review.revert)
    try:
        hermes_fs.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_importing_the_package_loads_nothing_heavy():
    code = ("import sys, hermes_fs\n"
            "print(sorted(m for m in sys.modules if m.startswith('hermes_fs')))\n"
            "print(any(m in sys.modules for m in ('litellm', 'git', 'mcp', 'apprise')))\n"
            "hermes_fs.Vault\n"
            "print('litellm' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["['hermes_fs', 'hermes_fs.errors']", "False", "False"]


def _imports(path: Path):
    """(module, name) for each `from X import name` in a file, with relative modules made absolute."""
    pkg = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                yield node.lineno, module, alias.name


def test_the_cli_and_the_mcp_server_use_the_public_api():
    """What the API offers, its front ends take from it, not from the modules behind it."""
    offered = {(m, a) for m, a in hermes_fs._LAZY.values() if a}
    behind = {m for m, a in hermes_fs._LAZY.values() if a is None}  # modules offered whole (`review`)
    front_ends = [*sorted((PKG / "cli").glob("*.py")), PKG / "cli" / "mcp_server.py"]
    bypass = [f"{p.relative_to(PKG)}:{line} from {m} import {n}" for p in front_ends for line, m, n in _imports(p)
              if (m, n) in offered or m in behind or f"{m}.{n}" in behind]
    assert bypass == []
    used = {n for p in front_ends for _line, m, n in _imports(p) if m == "hermes_fs"}
    assert {"open_vault", "Conversation", "refine", "learn", "review", "run_job"} <= used


def test_the_package_docstring_names_only_what_exists():
    doc = hermes_fs.__doc__ or ""
    named = set(re.findall(r"`([a-z_][a-z0-9_.]*)`", doc)) - {"__all__"}
    assert named, "the docstring names the layers"
    missing = []
    for name in named:
        dotted = name if name.startswith("hermes_fs") else f"hermes_fs.{name}"
        if not (ROOT / Path(*dotted.split("."))).is_dir() and not (ROOT / Path(*dotted.split("."))).with_suffix(".py").is_file():
            missing.append(name)
    assert missing == []
    for layer in ("store", "mind", "agent", "learning", "service", "cli"):
        assert f"`{layer}`" in doc or f"hermes_fs.{layer}" in doc


def test_the_repository_carries_its_architecture_notes():
    notes = (ROOT / "docs" / "design" / "architecture.md").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "docs/design/architecture.md" in readme and "](../" not in readme  # nothing outside the repository
    modules = sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")
                     if p.name not in ("__init__.py", "__main__.py") and p.parent != PKG)
    unnamed = [m for m in modules if not re.search(rf"\b{Path(m).stem}\b", notes)]
    assert unnamed == [], "name each new module in docs/design/architecture.md (layers diagram and concept table)"
    for flow in ("A turn", "A person's edit", "A learned change", "Review", "Scheduled jobs", "Inbox", "MCP"):
        assert f"**{flow}" in notes, flow
