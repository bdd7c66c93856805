"""The package's layering, checked over the real import graph (function-level imports included):
each layer imports only itself and the layers below it, and no module imports itself in a circle."""

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "hermes_fs"
LAYERS = ["errors", "store", "mind", "agent", "learning", "service", "cli", "__main__"]  # bottom first


def module_name(path: Path, pkg: Path = PKG) -> str:
    parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(pkg: Path = PKG) -> dict[str, Path]:
    return {module_name(p, pkg): p for p in pkg.rglob("*.py")}


def resolve(current: str, is_package: bool, node: ast.ImportFrom, known: dict) -> list[str]:
    """Absolute names of the modules a `from ... import ...` reaches inside hermes_fs."""
    if node.level:
        base = current.split(".") if is_package else current.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]


def type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside `if TYPE_CHECKING:` blocks (never run, so never a cycle)."""
    return {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and isinstance(block.test, ast.Name)
            and block.test.id == "TYPE_CHECKING" for stmt in block.body for n in ast.walk(stmt)}


def graph(pkg: Path = PKG, typing: bool = True, root: bool = False) -> dict[str, set[str]]:
    """Module -> the hermes_fs modules it imports; `typing=False` leaves out type-only imports,
    `root=True` keeps imports of the package root (its public API)."""
    known = modules(pkg)
    edges: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        skip = set() if typing else type_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                targets = resolve(name, path.name == "__init__.py", node, known)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in known and t != name and (root or t != "hermes_fs")}
    return edges


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 else -1


def test_every_module_belongs_to_a_layer():
    assert all(layer(m) >= 0 for m in modules() if m != "hermes_fs"), sorted(m for m in modules() if layer(m) < 0)


def test_no_upward_imports():
    upward = [(a, b) for a, targets in graph().items() for b in targets if layer(b) > layer(a) and a != "hermes_fs"]
    assert upward == []


def test_the_public_api_sits_above_the_service_layer():
    """`hermes_fs/__init__.py` exports names from every layer (service's `run_job` too), so only the
    CLI may import from it; a lower module naming the root would make an arrow that runs back up."""
    users = [m for m, targets in graph(root=True).items() if "hermes_fs" in targets and m != "hermes_fs"]
    assert [m for m in users if layer(m) < LAYERS.index("cli")] == []


def test_no_import_cycles():
    assert find_cycles(graph(typing=False)) == []


def test_no_import_circles_even_through_type_only_imports():
    """A circle that runs through `if TYPE_CHECKING:` imports never fails at import time, but its
    modules still each need the other to be read: a record both name belongs in a module below them."""
    assert find_cycles(graph()) == []


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    return cycles


def test_the_checker_finds_a_planted_upward_import_and_cycle(tmp_path):
    """The graph is real: plant an import from store/ up into service/, and a circle; both are found."""
    import shutil

    copy = tmp_path / "hermes_fs"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    files = copy / "store" / "files.py"
    files.write_text(files.read_text() + "\n\ndef _planted():\n    from ..service import daemon  # noqa\n")
    edges = graph(copy)
    assert "hermes_fs.service.daemon" in edges["hermes_fs.store.files"]
    assert layer("hermes_fs.service.daemon") > layer("hermes_fs.store.files")
    assert "hermes_fs.store.provenance" in edges["hermes_fs.learning.pipeline"]
    lock = copy / "store" / "lock.py"
    lock.write_text(lock.read_text() + "\n\nif TYPE_CHECKING:\n    from ..service import scheduler  # noqa\n")
    assert "hermes_fs.service.scheduler" in graph(copy)["hermes_fs.store.lock"]  # a type-only import is an edge...
    assert "hermes_fs.service.scheduler" not in graph(copy, typing=False)["hermes_fs.store.lock"]  # ...not a runtime one
    assert any("hermes_fs.store.lock" in c for c in find_cycles(graph(copy)))  # a circle all the same
    assert "hermes_fs.agent.sandbox.docker" in edges["hermes_fs.agent.sandbox"]  # lazy imports count
    assert any("hermes_fs.store.files" in c and "hermes_fs.service.daemon" in c for c in find_cycles(edges))


def imports_of(module: str) -> set[str]:
    return graph()[module]


SYNC = {"hermes_fs.service.sync", "hermes_fs.service.sync_service"}


@pytest.mark.slow
def test_the_parts_that_take_shared_work_do_not_import_the_sync_round():
    """Which machine does a piece of work is service/work.py's (the claims, built once by the daemon
    and passed in): the inbox, the scheduler and the gateway take work without knowing the round."""
    takers = ["hermes_fs.service.inbox", "hermes_fs.service.scheduler",
              *[m for m in modules() if m.startswith("hermes_fs.service.gateway")]]
    assert {m: imports_of(m) & SYNC for m in takers if imports_of(m) & SYNC} == {}
    assert imports_of("hermes_fs.service.work") & (SYNC | {"hermes_fs.service.decisions"}) == set()
    assert imports_of("hermes_fs.service.sync") & {"hermes_fs.service.sync_service", "hermes_fs.service.decisions"} == set()


def test_no_process_wide_claims_cache():
    """The claims are built by whoever composes the parts and passed in; a module-level dict of
    them would keep the settings of its first caller (and share one root's state between tests)."""
    cached = []
    for name in ("sync", "sync_service", "work", "scheduler", "inbox", "decisions"):
        for node in ast.parse((PKG / "service" / f"{name}.py").read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            cached += [f"{name}.{t.id}" for t in targets if isinstance(t, ast.Name) and "claims" in t.id.lower()]
    assert cached == []


PRIVATE_GIT = re.compile(r"\._git\(|\._commit_trees?\(")


def private_git_calls(pkg: Path = PKG) -> list[str]:
    """`file:line` of every call of GitStore's private runner (or commit writer) outside store/git_*.py."""
    found = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg).as_posix()
        if rel.startswith("store/git_"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE_GIT.search(line.split("#", 1)[0]):
                found.append(f"{rel}:{number}")
    return found


def test_git_plumbing_is_called_through_public_methods_only():
    """Outside store/git_*.py, git is reached through GitStore's public methods (refs, update_ref,
    delete_ref, blob_id, added_paths, ...), never its private runner: a copied `._git("update-ref",
    ...)` for main would bypass the VaultLock and the merge journal."""
    assert private_git_calls() == []


def test_the_private_git_check_finds_a_planted_call(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "service").mkdir()
    (tmp_path / "store" / "git_read.py").write_text('def rev(self):\n    return self._git("rev-parse")\n')
    (tmp_path / "service" / "sync.py").write_text('def f(store):\n    store._git("update-ref", "refs/heads/main", "x")\n')
    assert private_git_calls(tmp_path) == ["service/sync.py:2"]


DECIDING = re.compile(r"\b(?:changes|learned|review)\.(?:merge|reject|revert)\(|"
                      r"from [.\w]*changes import [^\n]*\b(?:merge|reject|revert)\b")


def test_every_decision_on_a_learned_change_goes_through_decide():
    """The CLI, the web page, chat commands and the library API all call service/decisions.decide,
    which claims the decision on the remote first: a front end calling learning.changes.merge,
    reject or revert itself would let two machines decide the same change."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("learning/") or rel == "service/decisions.py":
            continue
        found += [f"{rel}: {line.strip()}" for line in path.read_text().splitlines() if DECIDING.search(line)]
    assert found == []
    assert DECIDING.search("sha = changes.merge(self.store, name)") and DECIDING.search(
        "    from ...learning.changes import merge, resolve_name")
