#!/usr/bin/env bash
# Debian's Chromium (and its driver) for the web page's browser tests (`make test`).
# Playwright drives it by executable path; no browser is ever downloaded. Idempotent: with
# /usr/bin/chromium present it does nothing. Fails loudly when it cannot install (the browser
# tests are required, not optional).
# Also axe-core (the accessibility checker the browser tests inject into each page), from the npm
# registry into tests/.npm-axe (gitignored; its own prefix: an npm install into another prefix prunes
# what its package.json does not list), pinned; never fetched at test time. And the browser MCP server.
set -u
say() { echo "browser-test-env: $*"; }
AXE_VERSION=4.14.1
npm_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/.npm-axe"
if [ ! -f "$npm_dir/node_modules/axe-core/axe.min.js" ] \
   || ! grep -q "\"version\": \"$AXE_VERSION\"" "$npm_dir/node_modules/axe-core/package.json"; then
  command -v npm >/dev/null 2>&1 || { say "npm is missing (apt-get install npm): it installs axe-core"; exit 1; }
  say "installing axe-core $AXE_VERSION into $npm_dir"
  mkdir -p "$npm_dir"
  npm install --prefix "$npm_dir" --no-save --no-audit --no-fund --ignore-scripts "axe-core@$AXE_VERSION" >/tmp/browser-test-env-npm.log 2>&1 \
    || { cat /tmp/browser-test-env-npm.log; say "npm install axe-core failed"; exit 1; }
fi
# The browser recipe's MCP server (`hermes-fs mcp add browser`) at the version hermes_fs/agent/browser.py
# pins, into tests/.npm-mcp-browser (gitignored, a prefix of its own too), for tests/test_browser_mcp.py.
root="$(cd "$(dirname "$0")/.." && pwd)"
MCP_VERSION="$(sed -n 's/^VERSION = "\([^"]*\)".*/\1/p' "$root/hermes_fs/agent/browser.py")"
mcp_dir="$root/tests/.npm-mcp-browser"
if [ -z "$MCP_VERSION" ]; then say "no VERSION in hermes_fs/agent/browser.py"; exit 1; fi
if ! grep -q "\"version\": \"$MCP_VERSION\"" "$mcp_dir/node_modules/@playwright/mcp/package.json" 2>/dev/null; then
  command -v npm >/dev/null 2>&1 || { say "npm is missing (apt-get install npm): it installs @playwright/mcp"; exit 1; }
  say "installing @playwright/mcp $MCP_VERSION into $mcp_dir"
  mkdir -p "$mcp_dir"
  npm install --prefix "$mcp_dir" --no-save --no-audit --no-fund --ignore-scripts "@playwright/mcp@$MCP_VERSION" >/tmp/browser-test-env-npm.log 2>&1 \
    || { cat /tmp/browser-test-env-npm.log; say "npm install @playwright/mcp failed"; exit 1; }
fi
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "no /usr/bin/chromium and no way to install it here (needs root and apt-get: apt-get install chromium chromium-driver)"
  exit 1
fi
say "installing chromium and chromium-driver (Debian)"
# Other engineers' scripts may hold the dpkg lock: wait for it instead of failing.
apt_opts=(-o DPkg::Lock::Timeout=600 -y -qq)
(apt-get -o DPkg::Lock::Timeout=600 update -qq \
  && DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install --no-install-recommends \
     chromium chromium-driver fonts-dejavu-core) >/tmp/browser-test-env.log 2>&1 \
  || { cat /tmp/browser-test-env.log; say "apt-get install failed"; exit 1; }
/usr/bin/chromium --version
