"""The documentation: the site builds with every link and anchor checked, the README stays a front
door, and nothing the README used to describe got lost when the docs moved to docs/."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from hermes_fs.service.gateway import registry
from hermes_fs.store.config import Config

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FEATURES = Path(__file__).parent / "data" / "old_readme_features.txt"


def _documents() -> list[Path]:
    """The repository's documents: every Markdown file git tracks, but data (recorded conversations,
    test inputs)."""
    listed = subprocess.run(["git", "ls-files", "-z", "*.md"], cwd=ROOT, capture_output=True, text=True)
    names = [n for n in listed.stdout.split("\0") if n] if listed.returncode == 0 else []
    data = ("tests/", "bench/learning/")
    return [ROOT / n for n in names if not n.startswith(data) and (ROOT / n).is_file()] or [ROOT / "README.md"]


def test_the_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link, a missing anchor or a page missing from disk fails."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the dev extras (make install)")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-4000:]
    assert (tmp_path / "site" / "guide" / "getting-started" / "index.html").is_file()


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "make run" in text and "make test" in text
    assert text.index("make run") < text.index("## ")  # the two commands come first
    for server in ("Ollama", "llama.cpp", "LM Studio", "vLLM"):
        assert f"### {server}" in text, server
    commit_id = r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"
    assert not re.search(commit_id, text), "no commit ids in the README"


def test_the_readme_links_resolve():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links into docs/"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert missing == []


def test_no_developer_machine_paths_in_documents():
    pattern = re.compile(r"(?<![\w.~])(?:/(?:work|root)(?![\w-])|/tmp/\w|/home/(?!me/)\w)")
    offenders = []
    for path in _documents():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert offenders == []


def _guide_text() -> str:
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((DOCS / "guide").rglob("*.md"))])


def _yaml_keys(text: str) -> set[str]:
    """Dotted hermes.yaml keys shown in the guide's YAML blocks, read against the settings' schema
    (a mapping of names, such as `routes` or `servers`, skips its names)."""
    keys: set[str] = set()

    def walk(cls, data, prefix):
        if not isinstance(data, dict) or not dataclasses.is_dataclass(cls):
            return
        hints = typing.get_type_hints(cls)
        fields = {f.name.rstrip("_"): f.name for f in dataclasses.fields(cls) if not f.metadata.get("rest")}
        sections = any(f.metadata.get("rest") for f in dataclasses.fields(cls))  # gateway: channels' own
        for key, value in data.items():
            if key not in fields and sections and key in registry.CHANNELS:
                keys.add(prefix + key)
                walk(registry.channel_class(key).Settings, value, prefix + key + ".")
                continue
            if key not in fields:
                continue
            dotted = prefix + key
            keys.add(dotted)
            hint = hints[fields[key]]
            if typing.get_origin(hint) is dict:
                for named in value.values() if isinstance(value, dict) else ():
                    walk(typing.get_args(hint)[1], named, dotted + ".")
                continue
            inner = [a for a in (typing.get_args(hint) or (hint,)) if dataclasses.is_dataclass(a)]
            if inner:
                walk(inner[0], value, dotted + ".")

    for block in re.findall(r"```ya?ml\n(.*?)```", text, flags=re.S):
        try:
            data = yaml.safe_load(block)
        except yaml.YAMLError:
            continue
        walk(Config, data, "")
    return keys


def test_every_command_and_key_the_old_readme_described_is_in_the_guide():
    text = _guide_text()
    shown = _yaml_keys(text)
    missing = []
    for line in FEATURES.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        kind, name = line.split(" ", 1)
        if kind == "command":
            if not re.search(r"hermes-fs(?: --vault \S+)? " + re.escape(name) + r"(?![\w-])", text):
                missing.append(line)
        elif name not in shown and not re.search(r"`" + re.escape(name) + r"[`:= ]", text):
            missing.append(line)
    assert missing == []
