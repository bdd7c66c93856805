#!/usr/bin/env bash
# The mail servers the e-mail channel's tests run against: Dovecot (IMAP with IDLE, LMTP for
# delivery) from Debian's packages. The tests start their own instance on free 127.0.0.1 ports
# with a config in a temp dir (tests/mailenv.py); the packaged service is never started.
# aiosmtpd (the SMTP side) is a dev dependency in pyproject.toml. Idempotent.
set -euo pipefail
if command -v dovecot >/dev/null 2>&1 && [ -x /usr/lib/dovecot/lmtp ] && [ -x /usr/lib/dovecot/imap ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "mail-test-env: dovecot is missing; install it as root: apt-get install dovecot-imapd dovecot-lmtpd" >&2
  exit 0  # the tests that need it skip with this reason
fi
# Keep the package's own service from starting (it would take ports 143/993 for everyone).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q dovecot-imapd dovecot-lmtpd >/dev/null 2>&1 || { apt-get update -q >/dev/null; apt-get install -y -q dovecot-imapd dovecot-lmtpd >/dev/null; }
