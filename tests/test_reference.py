"""The generated pages (docs/reference/hermes-yaml.md, docs/reference/cli.md, docs/benchmarks/results.md)
match what the code and bench/results/ make now: a key, a command, an option or a result added
without `make reference` fails here, naming the page."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import sys
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "scripts" / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen():
    return _generator()


@pytest.mark.parametrize("page", ["docs/reference/hermes-yaml.md", "docs/reference/cli.md", "docs/benchmarks/results.md"])
def test_the_generated_page_is_fresh(gen, page):
    made = gen.PAGES[page]()
    assert (ROOT / page).read_text() == made, f"{page} is stale: run `make reference` (python scripts/gen_reference.py)"


def test_every_key_of_every_settings_class_is_listed_with_a_meaning(gen):
    from hermes_fs.service.gateway import registry
    from hermes_fs.store.config import Config

    def count(cls) -> int:
        n = 0
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if f.metadata.get("rest"):  # `gateway:`: each channel's own section, from the registry
                n += sum(1 + count(registry.channel_class(name).Settings) for name in registry.CHANNELS)
                continue
            n += 1
            args = typing.get_args(hint)
            if typing.get_origin(hint) is dict and dataclasses.is_dataclass(args[1]):
                n += count(args[1])
            elif (sub := gen._dataclass_of(hint)) is not None:
                n += count(sub)
        return n

    keys = gen.config_keys()
    assert len(keys) == count(Config)
    assert [k.dotted for k in keys if not k.meaning] == []
    by_name = {k.dotted: k for k in keys}
    assert by_name["sandbox.backend"].default == '"docker"' and "docker" in by_name["sandbox.backend"].meaning
    assert by_name["gateway.email.smtp.from"].type == "string"  # written `from:`, a Python keyword in the code
    assert by_name["gateway.webhook.routes.<name>.scheme"].default == '"standard"'


def test_a_field_comment_is_the_meaning(gen):
    @dataclasses.dataclass
    class Sample:
        """A sample section."""

        plain: int = 3  # on its own line
        # above it,
        # on two lines
        above: str = "x"
        nothing: bool = False

    notes = gen._comments(Sample)
    assert notes == {"plain": "on its own line", "above": "above it, on two lines", "nothing": ""}


def test_every_command_is_in_the_cli_page(gen):
    import click

    from hermes_fs.cli.main import main

    page = gen.cli_page()
    for path, cmd in gen._commands(main, ["hermes-fs"]):
        assert f"## `{' '.join(path)}`" in page
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert f"`{param.opts[0]}`" in page


def test_the_results_page_reads_the_result_files(gen, tmp_path):
    """A new figure in bench/results changes the page (it is made from the files, not written by hand)."""
    results = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", results)
    sys.path.insert(0, str(ROOT / "bench"))
    from results_table import results_page

    before = results_page(results)
    data = json.loads((results / "curate.json").read_text())
    data["duplicates_found"] = 999
    (results / "curate.json").write_text(json.dumps(data))
    after = results_page(results)
    assert before != after and "999 / " in after
    (results / "curate.json").unlink()
    assert "## The curator" not in results_page(results)


def test_every_trailer_is_in_the_trailers_page():
    """The trailer names are spelled once, in store/provenance.py; each has a row on the hand-written page."""
    source = (ROOT / "hermes_fs" / "store" / "provenance.py").read_text()
    block = source[source.index("trailer names"):]
    block = block[: block.index("\n\n")]  # the names are one block of assignments
    names = set(re.findall(r'^[A-Z_]+ = "([^"]+)"', block, flags=re.M))
    page = (ROOT / "docs" / "reference" / "trailers-and-refs.md").read_text()
    assert "Hermes-Session" in names and "Refine-Snapshot" in names
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert missing == [], "add a row for each to docs/reference/trailers-and-refs.md"


def test_every_state_file_the_code_names_is_in_the_vault_layout():
    """Each `state_dir / "name"` of the code (a file or folder under .hermes/) has a row on the page."""
    names = set()
    for path in (ROOT / "hermes_fs").rglob("*.py"):
        for parts in re.findall(r'state_dir\s*/\s*("[^"]+"(?:\s*/\s*"[^"]+")*)', path.read_text()):
            names.add("/".join(re.findall(r'"([^"]+)"', parts)))
    assert {"daemon.sock", "gateway/gateway.db", "sync/claims.json"} <= names
    page = (ROOT / "docs" / "reference" / "vault-layout.md").read_text()
    missing = sorted(n for n in names if f"`{n}" not in page)
    assert missing == [], "add a row for each to docs/reference/vault-layout.md (.hermes/)"
