'use strict';
// nanobot's WhatsApp bridge. nanobot (crates/nanobot-whatsapp) starts this script with `node`, writes a random
// token as the first line of its stdin and keeps stdin open for as long as it wants the bridge to live: end of
// stdin (nanobot stopped or died) makes the bridge exit, so it never outlives its parent.
//
// The bridge holds one WhatsApp Web (multi-device) connection and serves one WebSocket on 127.0.0.1 (a port
// the kernel picks, announced on stdout as `{"type":"listening","port":N}`). A client must present the token
// (`Authorization: Bearer <token>`); any other is refused with 401. Frames are JSON text, one object each:
//
//   bridge -> nanobot: {"type":"qr","qr":S}  {"type":"open","me":JID,"lid":JID|null}
//                      {"type":"closed","loggedOut":B,"reason":S}  {"type":"message", ...}  {"type":"ack","ref":N}
//                      {"type":"error","ref":N,"message":S}
//   nanobot -> bridge: {"type":"send","ref":N,"to":JID,"text":S}
//                      {"type":"send","ref":N,"to":JID,"media":{"kind":K,"mimetype":M,"fileName":F,"data":B64}}
//                      {"type":"read","chat":JID,"id":S,"participant":JID|null}
//
// Environment: NANOBOT_WA_AUTH_DIR (linked-device credentials), NANOBOT_WA_MODE (`run` or `login`),
// NANOBOT_WA_PROXY (optional HTTP proxy URL for the WhatsApp connection), NANOBOT_WA_SOCKET (tests only: a
// module that replaces the WhatsApp connection; see crates/nanobot-whatsapp/tests/scripted-socket.cjs).
//
// Exit codes: 0 stopped by nanobot, 2 the WhatsApp connection closed (nanobot restarts the bridge with backoff),
// 3 WhatsApp logged this device out (nanobot reports it and waits for `nanobot channels login whatsapp`),
// 4 a setup problem (bad token, missing package).

const crypto = require('node:crypto');
const readline = require('node:readline');

const EXIT_CLOSED = 2;
const EXIT_LOGGED_OUT = 3;
const EXIT_SETUP = 4;
const MAX_FRAME = 64 * 1024 * 1024;

function log(...args) {
  process.stderr.write(`[whatsapp-bridge] ${args.join(' ')}\n`);
}

let WebSocketServer;
try {
  ({ WebSocketServer } = require('ws'));
} catch (e) {
  log(`the npm package "ws" is missing (${e.code || e.message}); install the bridge's dependencies`);
  process.exit(EXIT_SETUP);
}

const authDir = process.env.NANOBOT_WA_AUTH_DIR || '';
const mode = process.env.NANOBOT_WA_MODE === 'login' ? 'login' : 'run';
const socketModule = process.env.NANOBOT_WA_SOCKET || '';
const proxy = process.env.NANOBOT_WA_PROXY || '';

let client = null; // the one authenticated WebSocket
const backlog = []; // events produced before nanobot connected
let connection = null; // { send(to, content), read(key), close() }
let exiting = false;
let clientArrived = null; // resolves a pending exit once nanobot connects

function emit(event) {
  const frame = JSON.stringify(event);
  if (client && client.readyState === 1) client.send(frame);
  else backlog.push(frame);
}

async function exit(code) {
  if (exiting) return;
  exiting = true;
  try {
    if (connection) await connection.close();
  } catch (e) {
    log(`closing the WhatsApp connection failed: ${e.message}`);
  }
  // Let queued frames reach nanobot before the process ends (waiting a little for it to connect, if it has not).
  if (!client) {
    await new Promise((resolve) => {
      clientArrived = resolve;
      setTimeout(resolve, 10000).unref();
    });
  }
  if (client && client.readyState === 1) {
    await new Promise((resolve) => {
      client.once('close', resolve);
      client.close(1000);
      setTimeout(resolve, 2000).unref();
    });
  }
  process.exit(code);
}

// Events from the WhatsApp connection, whichever implementation produced them.
const events = {
  qr: (qr) => emit({ type: 'qr', qr }),
  open: (me, lid) => emit({ type: 'open', me, lid: lid || null }),
  message: (m) => emit({ type: 'message', ...m }),
  closed: (loggedOut, reason) => {
    emit({ type: 'closed', loggedOut: Boolean(loggedOut), reason: String(reason || '') });
    exit(loggedOut ? EXIT_LOGGED_OUT : EXIT_CLOSED);
  },
};

function tokenMatches(header, token) {
  const want = Buffer.from(`Bearer ${token}`);
  const got = Buffer.from(String(header || ''));
  return got.length === want.length && crypto.timingSafeEqual(got, want);
}

async function handleFrame(raw) {
  let req;
  try {
    req = JSON.parse(raw.toString());
  } catch {
    emit({ type: 'error', ref: null, message: 'frame is not JSON' });
    return;
  }
  if (req.type === 'read') {
    if (connection) connection.read(req).catch((e) => log(`read receipt failed: ${e.message}`));
    return;
  }
  if (req.type !== 'send') {
    emit({ type: 'error', ref: req.ref ?? null, message: `unknown request type ${JSON.stringify(req.type)}` });
    return;
  }
  try {
    if (!connection) throw new Error('WhatsApp is not connected');
    if (typeof req.to !== 'string' || !req.to) throw new Error('"to" must be a chat JID');
    let content;
    if (req.media) {
      const m = req.media;
      const data = Buffer.from(String(m.data || ''), 'base64');
      content = { kind: String(m.kind || 'document'), mimetype: String(m.mimetype || 'application/octet-stream'),
        fileName: String(m.fileName || 'file'), caption: m.caption ? String(m.caption) : undefined, data };
    } else {
      content = { kind: 'text', text: String(req.text ?? '') };
    }
    await connection.send(req.to, content);
    emit({ type: 'ack', ref: req.ref });
  } catch (e) {
    emit({ type: 'error', ref: req.ref ?? null, message: String(e && e.message ? e.message : e) });
  }
}

function serve(token) {
  const wss = new WebSocketServer({
    host: '127.0.0.1',
    port: 0,
    maxPayload: MAX_FRAME,
    verifyClient: (info, done) => {
      if (!tokenMatches(info.req.headers.authorization, token)) return done(false, 401, 'Unauthorized');
      if (client) return done(false, 409, 'Conflict: nanobot is already connected');
      return done(true);
    },
  });
  wss.on('listening', () => {
    process.stdout.write(`${JSON.stringify({ type: 'listening', port: wss.address().port })}\n`);
  });
  wss.on('connection', (ws) => {
    client = ws;
    ws.on('message', (raw) => handleFrame(raw));
    ws.on('close', () => {
      if (client === ws) client = null;
    });
    while (backlog.length) ws.send(backlog.shift());
    if (clientArrived) clientArrived();
  });
  wss.on('error', (e) => {
    log(`cannot listen on 127.0.0.1: ${e.message}`);
    process.exit(EXIT_SETUP);
  });
}

// ---- the real WhatsApp connection (baileys) ---------------------------------------------------------------

function quietLogger() {
  const l = {
    level: 'warn',
    child: () => l,
    trace() {}, debug() {}, info() {},
    warn: (o, m) => log('baileys:', m || (o && o.msg) || ''),
    error: (o, m) => log('baileys error:', m || (o && o.msg) || ''),
    fatal: (o, m) => log('baileys fatal:', m || (o && o.msg) || ''),
  };
  return l;
}

function unwrap(message) {
  let m = message || {};
  for (let i = 0; i < 5; i += 1) {
    const inner = m.ephemeralMessage || m.viewOnceMessage || m.viewOnceMessageV2 || m.documentWithCaptionMessage;
    if (!inner || !inner.message) break;
    m = inner.message;
  }
  return m;
}

const MEDIA_FIELDS = [
  ['imageMessage', 'image', 'image/jpeg'],
  ['videoMessage', 'video', 'video/mp4'],
  ['audioMessage', 'audio', 'audio/ogg'],
  ['documentMessage', 'document', 'application/octet-stream'],
  ['stickerMessage', 'sticker', 'image/webp'],
];

async function startBaileys() {
  let baileys;
  try {
    baileys = require('@whiskeysockets/baileys');
  } catch (e) {
    log(`the npm package "@whiskeysockets/baileys" is missing (${e.code || e.message}); run \`nanobot channels login whatsapp\``);
    process.exit(EXIT_SETUP);
  }
  const makeWASocket = baileys.default || baileys.makeWASocket;
  const { useMultiFileAuthState, DisconnectReason, downloadMediaMessage, Browsers } = baileys;
  const logger = quietLogger();
  let agent;
  if (proxy) {
    try {
      const { HttpsProxyAgent } = require('https-proxy-agent');
      agent = new HttpsProxyAgent(proxy);
    } catch {
      log('NANOBOT_WA_PROXY is set but the npm package "https-proxy-agent" is not installed; connecting directly');
    }
  }
  let sock;
  let restarts = 0;
  const saving = new Set();
  const connect = async () => {
    const { state, saveCreds: save } = await useMultiFileAuthState(authDir);
    // Credential writes in flight are awaited before the process exits (a half-written creds.json would lose
    // the link).
    const saveCreds = () => {
      const p = Promise.resolve(save()).catch((e) => log(`saving the credentials failed: ${e.message}`));
      saving.add(p);
      p.finally(() => saving.delete(p));
      return p;
    };
    sock = makeWASocket({
      auth: state,
      logger,
      printQRInTerminal: false,
      markOnlineOnConnect: false,
      syncFullHistory: false,
      browser: Browsers ? Browsers.appropriate('nanobot') : ['nanobot', 'Desktop', '1.0'],
      agent,
    });
    sock.ev.on('creds.update', saveCreds);
    sock.ev.on('connection.update', (u) => {
      if (u.qr) events.qr(u.qr);
      if (u.connection === 'open') {
        restarts = 0;
        events.open(sock.user && sock.user.id, sock.user && sock.user.lid);
      }
      if (u.connection === 'close') {
        const status = u.lastDisconnect && u.lastDisconnect.error && u.lastDisconnect.error.output
          ? u.lastDisconnect.error.output.statusCode : undefined;
        // After a QR scan WhatsApp asks for one reconnect with the new credentials.
        if (status === DisconnectReason.restartRequired && restarts < 3) {
          restarts += 1;
          connect().catch((e) => events.closed(false, e.message));
          return;
        }
        const reason = (u.lastDisconnect && u.lastDisconnect.error && u.lastDisconnect.error.message) || `status ${status}`;
        events.closed(status === DisconnectReason.loggedOut, reason);
      }
    });
    if (mode === 'run') {
      sock.ev.on('messages.upsert', async ({ messages, type }) => {
        if (type !== 'notify') return;
        for (const msg of messages) {
          try {
            events.message(await toEvent(msg));
          } catch (e) {
            log(`dropping a message that could not be read: ${e.message}`);
          }
        }
      });
    }
  };
  const toEvent = async (msg) => {
    const key = msg.key || {};
    const m = unwrap(msg.message);
    const chat = key.remoteJid || '';
    let text = m.conversation || (m.extendedTextMessage && m.extendedTextMessage.text) || '';
    const mentions = [];
    let quotedParticipant = null;
    let forwarded = false;
    let media = null;
    for (const container of [m.extendedTextMessage, ...MEDIA_FIELDS.map(([f]) => m[f])]) {
      const ctx = container && container.contextInfo;
      if (!ctx) continue;
      mentions.push(...(ctx.mentionedJid || []));
      quotedParticipant = quotedParticipant || ctx.participant || null;
      forwarded = forwarded || Boolean(ctx.isForwarded) || (ctx.forwardingScore || 0) > 0;
    }
    for (const [field, kind, fallback] of MEDIA_FIELDS) {
      const part = m[field];
      if (!part) continue;
      if (!text && part.caption) text = part.caption;
      const data = await downloadMediaMessage(msg, 'buffer', {}, { logger, reuploadRequest: sock.updateMediaMessage });
      media = { kind, mimetype: part.mimetype || fallback, fileName: part.fileName || part.title || null,
        voice: Boolean(part.ptt), data: Buffer.from(data).toString('base64') };
      break;
    }
    return {
      id: key.id || '', chat, fromMe: Boolean(key.fromMe), isGroup: chat.endsWith('@g.us'),
      sender: key.participant || (chat.endsWith('@g.us') ? '' : chat),
      senderAlt: key.participantAlt || key.remoteJidAlt || null,
      pushName: msg.pushName || null, timestamp: Number(msg.messageTimestamp || 0),
      text, mentions, quotedParticipant, forwarded, media,
    };
  };
  await connect();
  return {
    async send(to, c) {
      if (c.kind === 'text') return sock.sendMessage(to, { text: c.text });
      if (c.kind === 'image') return sock.sendMessage(to, { image: c.data, mimetype: c.mimetype, caption: c.caption });
      if (c.kind === 'video') return sock.sendMessage(to, { video: c.data, mimetype: c.mimetype, caption: c.caption });
      if (c.kind === 'audio') return sock.sendMessage(to, { audio: c.data, mimetype: c.mimetype, ptt: false });
      return sock.sendMessage(to, { document: c.data, mimetype: c.mimetype, fileName: c.fileName, caption: c.caption });
    },
    async read(r) {
      await sock.readMessages([{ remoteJid: r.chat, id: r.id, participant: r.participant || undefined }]);
    },
    async close() {
      sock.end(undefined);
      // Let the last writes of the auth state land (bounded).
      const settle = new Promise((resolve) => setTimeout(resolve, 1000));
      await Promise.all([Promise.allSettled([...saving]), settle]);
    },
  };
}

// ---- start ------------------------------------------------------------------------------------------------

const lines = readline.createInterface({ input: process.stdin });
let started = false;
lines.on('line', async (line) => {
  if (started) return;
  started = true;
  const token = line.trim();
  if (token.length < 32) {
    log('the token on stdin is too short');
    process.exit(EXIT_SETUP);
  }
  if (!authDir) {
    log('NANOBOT_WA_AUTH_DIR is not set');
    process.exit(EXIT_SETUP);
  }
  serve(token);
  try {
    connection = socketModule
      ? await require(socketModule).start({ authDir, mode, events, log })
      : await startBaileys();
  } catch (e) {
    events.closed(false, `cannot start the WhatsApp connection: ${e.message}`);
  }
});
// nanobot closed our stdin (it stopped, or died): stop too.
lines.on('close', () => exit(0));
process.on('SIGTERM', () => exit(0));
