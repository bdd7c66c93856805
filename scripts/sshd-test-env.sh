#!/bin/sh
# A real OpenSSH server for the ssh sandbox tests, on 127.0.0.1 with its own config, host key and
# client key (never the machine's own sshd or keys).
#   scripts/sshd-test-env.sh --install   make sure Debian's openssh-server is installed (make test)
#   scripts/sshd-test-env.sh DIR         start sshd for the tests; writes DIR/env (PORT, USER, KEY,
#                                        KNOWN_HOSTS, PID) and prints it; exit 1 with the reason if it cannot
set -eu
SSHD=/usr/sbin/sshd

install_sshd() {
    [ -x "$SSHD" ] && return 0
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client >/dev/null 2>&1 ||
            { echo "sshd-test-env: apt-get install openssh-server failed" >&2; return 1; }
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server >/dev/null 2>&1 ||
            { echo "sshd-test-env: sudo apt-get install openssh-server failed" >&2; return 1; }
    else
        echo "sshd-test-env: $SSHD is missing and this user cannot install openssh-server" >&2; return 1
    fi
}

if [ "${1:-}" = "--install" ]; then
    install_sshd || true   # the tests skip, saying why, when there is no sshd
    exit 0
fi
DIR=${1:?usage: sshd-test-env.sh DIR | --install}
install_sshd
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
chmod 700 "$DIR"

# the test user: one of its own when we are root, else whoever runs the tests
USER_NAME=$(id -un)
if [ "$(id -u)" = 0 ]; then
    USER_NAME=hermes-ssh-test
    id "$USER_NAME" >/dev/null 2>&1 || useradd --create-home --shell /bin/sh "$USER_NAME"
    usermod -p "*" "$USER_NAME"  # no password, but not locked (sshd refuses a locked account)
    # Docker on a remote host (DOCKER_HOST=ssh://) is tested through this account: it may use the
    # local engine (as good as root here; the account has no password and only the test key)
    getent group docker >/dev/null && usermod -aG docker "$USER_NAME"
    mkdir -p /run/sshd && chmod 755 /run/sshd
fi
HOME_DIR=$(getent passwd "$USER_NAME" | cut -d: -f6)

ssh-keygen -q -t ed25519 -N '' -f "$DIR/host_key" -C hermes-test-host </dev/null >/dev/null
ssh-keygen -q -t ed25519 -N '' -f "$DIR/client_key" -C hermes-test-client </dev/null >/dev/null
# sshd reads the keys as the user: the test user's copy lives in its own home
AUTH_KEYS="$DIR/authorized_keys"
if [ "$(id -u)" = 0 ]; then
    AUTH_KEYS="$HOME_DIR/.hermes-test-authorized-keys"
fi
cp "$DIR/client_key.pub" "$AUTH_KEYS"
chmod 644 "$AUTH_KEYS"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$DIR/sshd_config" <<CONF
Port $PORT
ListenAddress 127.0.0.1
HostKey $DIR/host_key
PidFile $DIR/sshd.pid
AuthorizedKeysFile $AUTH_KEYS
AllowUsers $USER_NAME
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
LogLevel ERROR
CONF
printf '[127.0.0.1]:%s %s\n' "$PORT" "$(cut -d' ' -f1,2 "$DIR/host_key.pub")" > "$DIR/known_hosts"

"$SSHD" -f "$DIR/sshd_config" -E "$DIR/sshd.log" || { echo "sshd-test-env: sshd did not start: $(cat "$DIR/sshd.log")" >&2; exit 1; }
i=0
until python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "sshd-test-env: sshd is not listening on $PORT: $(cat "$DIR/sshd.log")" >&2; exit 1; }
    sleep 0.1
done
cat > "$DIR/env" <<ENV
PORT=$PORT
USER=$USER_NAME
HOME=$HOME_DIR
KEY=$DIR/client_key
KNOWN_HOSTS=$DIR/known_hosts
PID=$(cat "$DIR/sshd.pid" | tr -d "\n")
ENV
cat "$DIR/env"
