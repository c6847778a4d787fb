'use strict';
// Tests only: stands in for the WhatsApp connection inside the real bridge (NANOBOT_WA_SOCKET points here), so
// baileys and WhatsApp's servers are never used while everything between nanobot and the bridge is real.
//
// It connects to the test's control port (NANOBOT_WA_TEST_CONTROL=host:port) and speaks newline-delimited JSON:
//   test -> here:  {"emit":"qr","qr":S} | {"emit":"open","me":JID,"lid":JID} | {"emit":"message",...fields}
//                  {"emit":"closed","loggedOut":B,"reason":S} | {"crash":true} (the bridge process dies at once)
//                  {"failSends":B} (later sends fail, as a refused WhatsApp send would; answered with
//                  {"configured":{...}} so the test knows it took effect)
//   here -> test:  {"hello":{"mode":M,"authDir":D,"pid":N}} once connected, then {"sent":{"to":JID,...content}}
//                  for each send (media data as base64) and {"read":{...}} for each read receipt.

const net = require('node:net');

exports.start = ({ authDir, mode, events, log }) =>
  new Promise((resolve, reject) => {
    const [host, port] = String(process.env.NANOBOT_WA_TEST_CONTROL || '').split(':');
    const sock = net.connect({ host, port: Number(port) });
    let failSends = false;
    const report = (obj) => sock.write(`${JSON.stringify(obj)}\n`);
    sock.on('error', (e) => reject(e));
    sock.on('connect', () => {
      report({ hello: { mode, authDir, pid: process.pid } });
      resolve({
        async send(to, c) {
          if (failSends) throw new Error('scripted send failure');
          const { data, ...rest } = c;
          report({ sent: { to, ...rest, data: data ? data.toString('base64') : undefined } });
        },
        async read(r) {
          report({ read: r });
        },
        async close() {
          sock.end();
        },
      });
    });
    let buf = '';
    sock.on('data', (chunk) => {
      buf += chunk.toString();
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.trim()) continue;
        const cmd = JSON.parse(line);
        if (cmd.crash) process.kill(process.pid, 'SIGKILL');
        if (typeof cmd.failSends === 'boolean') {
          failSends = cmd.failSends;
          report({ configured: { failSends } });
        }
        if (cmd.emit === 'qr') events.qr(cmd.qr);
        if (cmd.emit === 'open') events.open(cmd.me, cmd.lid);
        if (cmd.emit === 'closed') events.closed(cmd.loggedOut, cmd.reason);
        if (cmd.emit === 'message') {
          const { emit: _e, ...m } = cmd;
          events.message(m);
        }
      }
    });
    sock.on('close', () => log('scripted control connection closed'));
  });
