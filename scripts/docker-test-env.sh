#!/usr/bin/env bash
# Make a Docker engine and the local sandbox test image available for the tests (`make test`).
# Docker Hub is not reachable from CI, so the image is a busybox-static rootfs imported locally.
# Never fails the build: on any problem it says why, and the Docker tests skip with that reason.
set -u
IMAGE=hermes-fs-test:busybox
LOG=${TMPDIR:-/tmp}/hermes-fs-dockerd.log
say() { echo "docker-test-env: $*"; }
root() { [ "$(id -u)" = 0 ]; }

if ! command -v dockerd >/dev/null 2>&1 || ! [ -x /bin/busybox ]; then
  if root && command -v apt-get >/dev/null 2>&1; then
    say "installing docker.io and busybox-static"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io busybox-static) >/dev/null 2>&1 \
      || say "apt-get install failed"
  fi
fi

engine_up() { docker info >/dev/null 2>&1; }
start_dockerd() {
  nohup dockerd "$@" >"$LOG" 2>&1 &
  for _ in $(seq 1 40); do engine_up && return 0; sleep 0.5; done
  kill $! 2>/dev/null; sleep 1; return 1
}
if ! engine_up; then
  if root && command -v dockerd >/dev/null 2>&1; then
    say "starting dockerd (log: $LOG)"
    start_dockerd || { say "retrying with the vfs storage driver"; start_dockerd --storage-driver=vfs; } \
      || say "dockerd did not start; see $LOG"
  else
    say "no Docker engine and no way to start one here"
  fi
fi

if engine_up && ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  if [ -x /bin/busybox ]; then
    rootfs=$(mktemp -d)
    mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/workspace" "$rootfs/etc" && chmod 1777 "$rootfs/tmp"
    cp /bin/busybox "$rootfs/bin/busybox"
    for applet in $(/bin/busybox --list); do [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"; done
    echo "nobody:x:65534:65534:nobody:/tmp:/bin/sh" > "$rootfs/etc/passwd"
    tar -C "$rootfs" -c . | docker import - "$IMAGE" >/dev/null && say "built $IMAGE"
    rm -rf "$rootfs"
  else
    say "busybox-static is missing; cannot build $IMAGE"
  fi
fi
exit 0
