#!/usr/bin/env bash
# Debian's Chromium (and its driver) for the web page's browser tests (`make test`).
# Playwright drives it by executable path; no browser is ever downloaded. Idempotent: with
# /usr/bin/chromium present it does nothing. Fails loudly when it cannot install (the browser
# tests are required, not optional).
set -u
say() { echo "browser-test-env: $*"; }
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
