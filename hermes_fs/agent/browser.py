"""The browser recipe (`hermes-fs mcp add browser`): Microsoft's Playwright MCP server, installed
from npm at a pinned version into a folder of its own, driving this machine's Chromium headless
with a profile kept in memory, and listed in hermes.yaml under `mcp.servers`.

Every page is hostile input, so the entry offers only the tools that act inside the page (no
running code in the server's own process, no uploading this machine's files, no screenshots
saved where the model says), the server runs in a folder of its own (what it saves lands there,
never in the person's current folder), and, like any MCP server, unattended sessions get it only
once a person sets `unattended: true` (the recipe writes false). The entry holds absolute paths;
on another machine the vault syncs to, the same command installs the same version there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfigError, HermesError, InputError
from ..store.config import CONFIG_NAME, McpServerConfig
from ..store.provenance import Act
from ..store.vault import Vault

PACKAGE = "@playwright/mcp"
VERSION = "0.0.86"  # pinned: a newer server may rename or add tools; the recipe is tested with this one
BIN = "playwright-mcp"
# what the model may do with the page; left out: browser_run_code_unsafe and browser_evaluate (code in
# the server's process, or files written where the model says), browser_file_upload (sends this
# machine's files), browser_take_screenshot (images are not sent to the model; files), drag and drop
TOOLS = ("browser_navigate", "browser_navigate_back", "browser_snapshot", "browser_click", "browser_type",
         "browser_fill_form", "browser_select_option", "browser_press_key", "browser_hover", "browser_wait_for",
         "browser_handle_dialog", "browser_tabs", "browser_close")
CHROMIUMS = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
TIMEOUT_S = 60.0  # a call, or the start (a page load is cut at half of it by the server itself)
NPM_TIMEOUT_S = 600
MIN_NODE = 20  # what the package's `engines` asks for


@dataclass(frozen=True)
class BrowserSetup:
    """What `mcp add browser` did."""

    name: str
    command: Path  # the installed server
    chromium: str
    installed: bool  # npm ran now (False: the pinned version was there already)
    added: bool  # hermes.yaml gained the entry (False: the same entry was there)

    def line(self) -> str:
        done = "installed" if self.installed else "already installed"
        entry = f"added mcp.servers.{self.name} to {CONFIG_NAME}" if self.added else f"mcp.servers.{self.name} already set"
        return (f"{PACKAGE} {VERSION} {done} at {self.command}; {entry} (Chromium: {self.chromium}, headless); "
                f"interactive sessions get its tools as {self.name}__browser_*, unattended ones only with "
                f"`unattended: true`; `hermes-fs doctor` checks it")


def default_prefix() -> Path:
    """Where the server is installed: the person's data folder, one folder per pinned version."""
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "hermes-fs" / "npm" / f"playwright-mcp-{VERSION}"


def find_chromium(given: str | None = None) -> str:
    """The Chromium to drive: `given`, else the first of CHROMIUMS found (an absolute path)."""
    for candidate in ([given] if given else CHROMIUMS):
        found = shutil.which(candidate)
        if found:
            return os.path.realpath(found) if given else found
    if given:
        raise InputError(f"no Chromium at {given!r} (give the path of an executable browser)")
    raise InputError("no Chromium found (Debian: apt-get install chromium; or give its path with --chromium)")


def node_version() -> tuple[int, str] | None:
    """Node's major version and full version, or None when `node` is missing."""
    node = shutil.which("node")
    if not node:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"v(\d+)\.", out)
    return (int(m.group(1)), out) if m else None


def installed(prefix: Path) -> Path | None:
    """The server's executable under `prefix` when the pinned version is there."""
    exe = prefix / "node_modules" / ".bin" / BIN
    meta = prefix / "node_modules" / "@playwright" / "mcp" / "package.json"
    try:
        ok = json.loads(meta.read_text(encoding="utf-8")).get("version") == VERSION
    except (OSError, ValueError):
        return None
    return exe if ok and os.access(exe, os.X_OK) else None


def install(prefix: Path) -> tuple[Path, bool]:
    """The pinned server under `prefix` (npm install when it is missing): (executable, npm ran).
    Install scripts are not run, and no browser is downloaded: the system's Chromium is used."""
    have = installed(prefix)
    if have is not None:
        return have, False
    node = node_version()
    if node is None or node[0] < MIN_NODE:
        raise InputError(f"Node.js {MIN_NODE} or newer is needed ({'missing' if node is None else node[1]}; "
                         "Debian: apt-get install nodejs npm)")
    npm = shutil.which("npm")
    if not npm:
        raise InputError("npm is missing (Debian: apt-get install npm)")
    prefix.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund",
                            "--ignore-scripts", f"{PACKAGE}@{VERSION}"],
                           capture_output=True, text=True, timeout=NPM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise HermesError(f"npm install {PACKAGE}@{VERSION} took over {NPM_TIMEOUT_S} s") from None
    exe = installed(prefix)
    if r.returncode != 0 or exe is None:
        tail = " ".join((r.stderr or r.stdout).split())[-400:]
        raise HermesError(f"npm install {PACKAGE}@{VERSION} into {prefix} failed: {tail or f'exit {r.returncode}'}")
    return exe, True


def server_config(command: Path, chromium: str, prefix: Path) -> McpServerConfig:
    """The entry: headless, an in-memory profile, page text read through browser_snapshot (the
    server would otherwise save each page's text to a file and send its name)."""
    return McpServerConfig(
        command=str(command),
        args=["--browser", "chromium", "--executable-path", chromium, "--headless", "--isolated",
              "--snapshot-mode", "none", "--image-responses", "omit", "--timeout-navigation", str(int(TIMEOUT_S * 500)),
              "--output-dir", str(prefix / "output")],
        cwd=str(prefix / "work"), tools=list(TOOLS), timeout_s=TIMEOUT_S, unattended=False)


def is_recipe(cfg: McpServerConfig) -> bool:
    return bool(cfg.command) and Path(cfg.command or "").name == BIN


def add_browser(vault: Vault, name: str = "browser", prefix: Path | None = None,
                chromium: str | None = None) -> BrowserSetup:
    """Install the server (when missing) and add `mcp.servers.<name>` to hermes.yaml (one commit
    as the person). An entry of that name already there is left alone when it is this one, and
    refused when it differs: it is the person's to change."""
    from .mcp_client import valid_server_name

    if not valid_server_name(name):
        raise InputError("a server name may use letters, digits, - and _ (not __), at most 40")
    browser = find_chromium(chromium)
    prefix = Path(os.path.abspath(os.path.expanduser(prefix))) if prefix else default_prefix()
    exe, ran = install(prefix)
    for sub in ("work", "output"):
        (prefix / sub).mkdir(parents=True, exist_ok=True)
    want = server_config(exe, browser, prefix)
    have = vault.config.mcp.servers.get(name)
    if have is not None:
        if have != want:
            raise InputError(f"mcp.servers.{name} is already set, differently; edit or remove it in {CONFIG_NAME}, "
                             "or add this one under another --name", CONFIG_NAME)
        return BrowserSetup(name, exe, browser, ran, False)
    path = vault.root / CONFIG_NAME
    before = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(with_server(before, name, want), encoding="utf-8")
    try:
        got = vault.reload_config().mcp.servers.get(name)
        if got != want:
            raise ConfigError(f"{CONFIG_NAME}: mcp.servers.{name} did not read back as written", CONFIG_NAME)
    except (ConfigError, HermesError):
        path.write_text(before, encoding="utf-8")
        vault.reload_config()
        raise
    vault.git.commit_paths([CONFIG_NAME], f"mcp: add the browser ({PACKAGE} {VERSION}) as {name}", Act.person())
    return BrowserSetup(name, exe, browser, ran, True)


def with_server(text: str, name: str, cfg: McpServerConfig) -> str:
    """hermes.yaml's text with `mcp.servers.<name>` added as a block, every other line and
    comment as it was. A section written on one line (`mcp: {...}`) is refused: it is edited by hand."""
    raw = yaml.safe_load(text) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{CONFIG_NAME} is not a mapping", CONFIG_NAME)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    head = next((i for i, line in enumerate(lines) if re.match(r"mcp:\s*(#.*)?$", line)), None)
    if head is None:
        if "mcp" in raw:
            raise InputError(f"`mcp:` is written on one line in {CONFIG_NAME}; add the browser there by hand", CONFIG_NAME)
        return "".join(lines) + "mcp:\n  servers:\n" + _block(cfg, name, "    ")
    end = _block_end(lines, head, 0)
    servers = next((i for i in range(head + 1, end) if re.match(r"\s+servers:\s*(#.*)?$", lines[i])), None)
    if servers is None:
        if any(re.match(r"\s+servers:", lines[i]) for i in range(head + 1, end)):
            raise InputError(f"`mcp.servers:` is written on one line in {CONFIG_NAME}; add the browser there by hand",
                             CONFIG_NAME)
        indent = next((_indent(lines[i]) for i in range(head + 1, end) if _content(lines[i])), "  ")
        lines.insert(head + 1, f"{indent}servers:\n" + _block(cfg, name, indent * 2))
        return "".join(lines)
    own = _indent(lines[servers])
    stop = _block_end(lines, servers, len(own))
    child = next((_indent(lines[i]) for i in range(servers + 1, stop) if _content(lines[i])), own + "  ")
    while stop > servers + 1 and not _content(lines[stop - 1]):
        stop -= 1  # after the last server, before blank lines and comments that follow it
    lines.insert(stop, _block(cfg, name, child))
    return "".join(lines)


def _content(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _block_end(lines: list[str], head: int, width: int) -> int:
    """The line after the block opened at `head` (lines indented deeper than `width`, or blank)."""
    end = head + 1
    while end < len(lines) and (not _content(lines[end]) or len(_indent(lines[end])) > width):
        end += 1
    return end


def _block(cfg: McpServerConfig, name: str, indent: str) -> str:
    def show(value) -> str:
        return json.dumps(value)

    inner = indent + "  "
    return (f"{indent}{name}:  # hermes-fs mcp add browser: {PACKAGE} {VERSION} driving Chromium headless\n"
            f"{inner}command: {show(cfg.command)}\n"
            f"{inner}args: {show(cfg.args)}\n"
            f"{inner}cwd: {show(cfg.cwd)}\n"
            f"{inner}tools: {show(cfg.tools)}\n"
            f"{inner}timeout_s: {cfg.timeout_s:g}\n"
            f"{inner}unattended: false  # true: gateway chats, cron jobs, inbox requests and webhooks may browse too\n")


def doctor(hub, servers: dict[str, McpServerConfig]) -> list[tuple[str, bool, str]]:
    """For each browser entry: Node, the Chromium it names, and one page opened through the server
    (`about:blank`), which proves the server can launch that browser here."""
    rows: list[tuple[str, bool, str]] = []
    for name, cfg in servers.items():
        if not is_recipe(cfg):
            continue
        label = name if name == "browser" else f"{name} (browser)"
        node = node_version()
        rows.append((f"{label} node", node is not None and node[0] >= MIN_NODE,
                     node[1] if node else f"missing (Node.js {MIN_NODE}+ runs the server; apt-get install nodejs)"))
        path = _arg(cfg.args, "--executable-path")
        ok = bool(path) and os.access(path or "", os.X_OK)
        rows.append((f"{label} chromium", ok, _chromium_version(path) if ok else
                     f"{path or 'no --executable-path'} is missing (apt-get install chromium)"))
        if hub.servers[name].client is None:
            continue  # the server's own row says why it did not start
        opened = hub.call(f"{name}__browser_navigate", {"url": "about:blank"})
        rows.append((f"{label} page", not opened.startswith("error"),
                     "opened about:blank headless" if not opened.startswith("error") else opened[:300]))
    return rows


def _arg(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _chromium_version(path: str | None) -> str:
    try:
        out = subprocess.run([path or "", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    return f"{path}: {' '.join(out.split()) or 'present'}"
