#!/usr/bin/env bash
# Installs the real programs the tests talk to (MCP servers, a Telegram Bot API emulator, an OpenAI-compatible
# mock, the OpenAI Python SDK) into .ci/.peers/, pinned by .ci/peers/package-lock.json and requirements.txt.
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
# --- Browser for the WebUI tests (Debian's chromium; playwright-core above drives it) -------------------------
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null; then
  echo "install-peers: chromium" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
echo "install-peers: ready in $dest" >&2
