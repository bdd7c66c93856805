#!/usr/bin/env bash
# The fonts PDF reports use (agent/pdf.py) and poppler's pdftotext, which the report tests read them back
# with (tests/test_pdf.py): DejaVu (Latin, Greek, Cyrillic, ...), Noto Sans CJK (Chinese, Japanese,
# Korean) and Symbola (emoji, monochrome outlines fpdf2 can embed). Idempotent: with all present it does
# nothing. Fails loudly when it cannot install.
set -u
say() { echo "reports-test-env: $*"; }
have() {
  command -v pdftotext >/dev/null 2>&1 \
    && [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] \
    && ls /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.tt? >/dev/null 2>&1 \
    && ls /usr/share/fonts/truetype/ancient-scripts/Symbola*.ttf >/dev/null 2>&1
}
have && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "fonts or pdftotext missing and no way to install them here (needs root and apt-get:"
  say "  apt-get install poppler-utils fonts-dejavu-core fonts-noto-cjk fonts-symbola)"
  exit 1
fi
packages=(poppler-utils fonts-dejavu-core fonts-noto-cjk fonts-symbola)
say "installing ${packages[*]} (Debian)"
# Other engineers' scripts may hold the dpkg lock: wait for it instead of failing.
apt_opts=(-o DPkg::Lock::Timeout=600 -y -qq --no-install-recommends)
DEBIAN_FRONTEND=noninteractive apt-get install "${apt_opts[@]}" "${packages[@]}" >/tmp/reports-test-env-apt.log 2>&1 \
  || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install "${apt_opts[@]}" "${packages[@]}" >/tmp/reports-test-env-apt.log 2>&1; } \
  || { cat /tmp/reports-test-env-apt.log; say "apt-get install failed"; exit 1; }
have || { say "still missing after the install: $(ls /usr/share/fonts/opentype/noto /usr/share/fonts/truetype/ancient-scripts 2>&1)"; exit 1; }
