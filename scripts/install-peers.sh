#!/usr/bin/env bash
# Installs the real programs the tests talk to (MCP servers, a Telegram Bot API emulator, an OpenAI-compatible
# mock, the OpenAI Python SDK, aiosmtpd) into .ci/.peers/, Dovecot from Debian, pinned by .ci/peers/package-lock.json and requirements.txt.
# Idempotent: a second run with unchanged pins does nothing. Needs node/npm and python3 (with venv).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pins="$root/.ci/peers"
dest="$root/.ci/.peers"
mkdir -p "$dest/node"

stamp() { cat "$@" | sha256sum | cut -d' ' -f1; }

# --- npm peers -------------------------------------------------------------------------------------------
want=$(stamp "$pins/package.json" "$pins/package-lock.json")
if [ "$(cat "$dest/node/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-peers: npm packages" >&2
  cp "$pins/package.json" "$pins/package-lock.json" "$dest/node/"
  (cd "$dest/node" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" > "$dest/node/.stamp"
fi

# --- Python peers ----------------------------------------------------------------------------------------
want=$(stamp "$pins/requirements.txt")
if [ "$(cat "$dest/venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-peers: python packages" >&2
  if ! python3 -m venv "$dest/venv" 2>/dev/null; then
    if command -v apt-get >/dev/null; then
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$dest/venv"
  fi
  "$dest/venv/bin/pip" install --quiet --disable-pip-version-check -r "$pins/requirements.txt"
  echo "$want" > "$dest/venv/.stamp"
fi
# --- Debian peers: Dovecot (IMAP with IDLE) for the e-mail channel's tests --------------------------------
# The tests start their own dovecot with a generated config; the system service is not used.
if ! command -v dovecot >/dev/null && command -v apt-get >/dev/null; then
  echo "install-peers: dovecot-imapd (apt)" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends dovecot-imapd >/dev/null
fi
echo "install-peers: ready in $dest" >&2
