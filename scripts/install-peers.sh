#!/usr/bin/env bash
# Installs the real programs the tests talk to into .ci/.peers/, pinned by .ci/peers/package-lock.json,
# requirements.txt and nanobot-requirements.txt: MCP servers, a Telegram Bot API emulator, an OpenAI-compatible
# mock, Slack's emulator, playwright-core (npm); the OpenAI/Anthropic SDKs, aiosmtpd, lark-oapi, dingtalk-stream
# (PyPI); the Python nanobot 0.3.5 (its own venv); and, from Debian when missing, bubblewrap, chromium, dovecot,
# nats-server.
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

# --- The WhatsApp bridge's npm packages for the tests: only `ws` (the pinned @whiskeysockets/baileys is optional
# and left out: the tests replace the WhatsApp connection inside the real bridge, and baileys fetches parts of
# itself from github.com). Users get both from `nanobot channels login whatsapp`.
wa_pins="$root/crates/nanobot-whatsapp/bridge/package.json"
want=$(stamp "$wa_pins")
if [ "$(cat "$dest/whatsapp-bridge/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-peers: whatsapp bridge (ws)" >&2
  mkdir -p "$dest/whatsapp-bridge"
  cp "$wa_pins" "$dest/whatsapp-bridge/package.json"
  (cd "$dest/whatsapp-bridge" && npm install --omit=optional --no-package-lock --no-audit --no-fund --loglevel=error)
  echo "$want" > "$dest/whatsapp-bridge/.stamp"
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
# --- The Python nanobot (own venv: its anthropic<1 pin conflicts with the shared venv's) ---------------
want=$(stamp "$pins/nanobot-requirements.txt")
if [ "$(cat "$dest/nanobot-venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-peers: python nanobot" >&2
  python3 -m venv "$dest/nanobot-venv"
  "$dest/nanobot-venv/bin/pip" install --quiet --disable-pip-version-check -r "$pins/nanobot-requirements.txt"
  echo "$want" > "$dest/nanobot-venv/.stamp"
fi
# --- A Matrix homeserver (synapse) and matrix-nio (own venv: synapse's ~70 packages keep their own pins) ----------
want=$(stamp "$pins/synapse-requirements.txt")
if [ "$(cat "$dest/synapse-venv/.stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-peers: matrix-synapse" >&2
  python3 -m venv "$dest/synapse-venv"
  "$dest/synapse-venv/bin/pip" install --quiet --disable-pip-version-check -r "$pins/synapse-requirements.txt"
  echo "$want" > "$dest/synapse-venv/.stamp"
fi
# --- Debian packages: programs the tests run (each only when missing; one apt-get for all) ------------------
# bubblewrap: exec's namespace sandbox (docs/security.md), tested by nanobot-tools.
# chromium: the WebUI's browser tests (playwright-core, from the npm pins, drives Debian's build).
# dovecot-imapd: IMAP with IDLE for the e-mail channel's tests (they start their own dovecot with a generated
# config; the system service is not used).
# nats-server: JetStream for the durable bus's tests (nanobot-bus-nats; each test starts its own server).
# curl, wget: the clients a confined command tries the network with (the egress tests of nanobot-tools).
# libmagic1: python-magic, which pysignalclijsonrpc (the signal-cli client proving the testkit's fake) loads.
need=()
[ -e /usr/lib/x86_64-linux-gnu/libmagic.so.1 ] || ldconfig -p 2>/dev/null | grep -q 'libmagic\.so\.1' || need+=(libmagic1)
command -v curl >/dev/null || need+=(curl)
command -v wget >/dev/null || need+=(wget)
command -v bwrap >/dev/null || need+=(bubblewrap)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v dovecot >/dev/null || need+=(dovecot-imapd)
command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || need+=(nats-server)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    echo "install-peers: ${need[*]} (apt)" >&2
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "install-peers: please install ${need[*]} (no apt-get here)" >&2
  fi
fi
echo "install-peers: ready in $dest" >&2
