"""`mcp add browser` on hermes.yaml as people write it (comments and other servers kept, one-line
sections refused), and bad input refused before anything is installed or written. The browser
itself is driven in tests/test_browser_mcp.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hermes_fs.agent import browser
from hermes_fs.errors import HermesError

ENTRY = browser.server_config(Path("/opt/pw/node_modules/.bin/playwright-mcp"), "/usr/bin/chromium", Path("/opt/pw"))


@pytest.mark.parametrize("text", [
    "",
    "model: m  # my model\n",
    "model: m",  # no final newline
    "mcp:\n  servers:\n    time: {command: t}\n\n# my notes\nmodel: m\n",
    "mcp:  # servers\n    servers:\n        t:\n            command: t\n        u: {command: u}\nmodel: x\n",
    "mcp:\n  other: 1\n",
])
def test_the_entry_is_added_and_everything_else_kept(text):
    out = browser.with_server(text, "browser", ENTRY)
    before = yaml.safe_load(text) or {}
    after = yaml.safe_load(out)
    assert after["mcp"]["servers"]["browser"]["unattended"] is False
    assert after["mcp"]["servers"]["browser"]["tools"] == list(browser.TOOLS)
    assert "browser_run_code_unsafe" not in out and "browser_file_upload" not in out
    for key, value in before.items():
        if key != "mcp":
            assert after[key] == value
    for name, server in ((before.get("mcp") or {}).get("servers") or {}).items():
        assert after["mcp"]["servers"][name] == server
    for line in text.splitlines():
        assert line in out  # comments and lines as they were


@pytest.mark.parametrize("text", ["mcp: {servers: {}}\n", "mcp:\n  servers: {time: {command: t}}\n"])
def test_a_section_on_one_line_is_left_to_the_person(text):
    with pytest.raises(HermesError, match="on one line"):
        browser.with_server(text, "browser", ENTRY)


def test_bad_input_is_refused_before_anything_is_written(vault, tmp_path):
    before = (vault.root / "hermes.yaml").read_text()
    with pytest.raises(HermesError, match="server name"):
        browser.add_browser(vault, name="a__b", prefix=tmp_path / "npm")
    with pytest.raises(HermesError, match="no Chromium at"):
        browser.add_browser(vault, prefix=tmp_path / "npm", chromium=str(tmp_path / "not-a-browser"))
    assert (vault.root / "hermes.yaml").read_text() == before
    assert not (tmp_path / "npm").exists()  # nothing installed either
