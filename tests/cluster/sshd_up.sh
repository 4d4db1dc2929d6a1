#!/usr/bin/env bash
# Starts a private sshd on 127.0.0.1 for the ssh launcher test: host and client
# keys, authorized_keys and config all in a state folder (default
# /tmp/troupe-sshd, or $TROUPE_SSHD_DIR), port $TROUPE_SSHD_PORT (default 2222).
# Prints the path of an ssh wrapper to put in TROUPE_SSH. Idempotent.
# Exit codes: 0 up; 77 cannot run here (not root, no apt); 1 failed.
set -euo pipefail
state=${TROUPE_SSHD_DIR:-/tmp/troupe-sshd}
port=${TROUPE_SSHD_PORT:-2222}

skip() { echo "sshd_up: skipped: $*" >&2; exit 77; }
fail() { echo "sshd_up: $*" >&2; [[ -f $state/sshd.log ]] && tail -n 20 "$state/sshd.log" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root (sshd logs users in)"
need=()
for p in openssh-server openssh-client; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  command -v apt-get >/dev/null || skip "apt-get is not available to install ${need[*]}"
  apt-get update -qq || skip "apt-get update failed (no network?)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
    skip "apt-get install ${need[*]} failed"
fi

wrapper="$state/ssh"
if [[ -x $wrapper && -s $state/sshd.pid ]] && kill -0 "$(cat "$state/sshd.pid")" 2>/dev/null &&
   "$wrapper" 127.0.0.1 true 2>/dev/null; then
  echo "$wrapper"
  exit 0
fi
"$(dirname "$0")/sshd_down.sh" >/dev/null 2>&1 || true

mkdir -p "$state" /run/sshd && chmod 0700 "$state"
ssh-keygen -q -t ed25519 -N '' -f "$state/host_key" -C troupe-test-host
ssh-keygen -q -t ed25519 -N '' -f "$state/client_key" -C troupe-test-client
cp "$state/client_key.pub" "$state/authorized_keys"
cat > "$state/sshd_config" <<CONF
# Written by tests/cluster/sshd_up.sh: key login for root on loopback only.
ListenAddress 127.0.0.1
Port $port
HostKey $state/host_key
AuthorizedKeysFile $state/authorized_keys
PidFile $state/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
CONF
cat > "$wrapper" <<WRAP
#!/bin/sh
# ssh to the test sshd (tests/cluster/sshd_up.sh): use as TROUPE_SSH.
exec ssh -p $port -i $state/client_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \\
  -o LogLevel=ERROR "\$@"
WRAP
chmod +x "$wrapper"
/usr/sbin/sshd -f "$state/sshd_config" -E "$state/sshd.log" || fail "sshd did not start"
for _ in $(seq 1 50); do
  if "$wrapper" -o BatchMode=yes 127.0.0.1 true 2>/dev/null; then
    echo "$wrapper"
    exit 0
  fi
  sleep 0.2
done
fail "cannot log in to sshd on 127.0.0.1:$port"
