#!/usr/bin/env bash
# Debian's espeak-ng for the voice tests (`make test`, tests marked `espeak`): real speech, spoken
# from a phrase, that the offline engine (pocketsphinx) and the gateway's channels are fed.
# Idempotent: with espeak-ng present it does nothing. Fails loudly when it cannot install.
set -u
say() { echo "voice-test-env: $*"; }
command -v espeak-ng >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  say "no espeak-ng and no way to install it here (needs root and apt-get: apt-get install espeak-ng)"
  exit 1
fi
say "installing espeak-ng (Debian)"
# Other engineers' scripts may hold the dpkg lock: wait for it instead of failing.
apt_opts=(-o DPkg::Lock::Timeout=600 -y -qq)
DEBIAN_FRONTEND=noninteractive apt-get install "${apt_opts[@]}" espeak-ng >/tmp/voice-test-env-apt.log 2>&1 \
  || { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install "${apt_opts[@]}" espeak-ng >/tmp/voice-test-env-apt.log 2>&1; } \
  || { cat /tmp/voice-test-env-apt.log; say "apt-get install espeak-ng failed"; exit 1; }
command -v espeak-ng >/dev/null 2>&1 || { say "espeak-ng still missing after the install"; exit 1; }
