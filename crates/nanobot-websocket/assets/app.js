// nanobot WebUI: one file, no framework, no build step. Everything the server or the model says is escaped
// before it is turned into HTML (see md()); user text is only ever set with textContent.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const log = $('log'), input = $('input'), stopBtn = $('stop'), sendBtn = $('send');
  const state = {
    ws: null, chat: null, readonly: false, running: false, retry: 0, apiToken: null, temporary: null,
    streams: new Map(), pending: new Map(), files: [], commands: [], slashIdx: 0, reqSeq: 0,
  };

  // ---------- safe Markdown ----------
  const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

  // Inline spans of already-escaped text. Code spans are cut out first so nothing inside them is formatted.
  function inline(t) {
    const codes = [];
    t = t.replace(/`([^`\n]+)`/g, (_, c) => { codes.push(c); return '\u0000' + (codes.length - 1) + '\u0000'; });
    t = t.replace(/\[([^\]\n]+)\]\(([^)\s]+)\)/g, (m, label, url) => {
      // url is escaped text; only web and mail links become anchors
      if (!/^(https?:|mailto:)/i.test(url)) return m;
      return '<a href="' + url + '" target="_blank" rel="noopener noreferrer">' + label + '</a>';
    });
    t = t.replace(/\*\*([^*\n]+)\*\*/g, '<strong>$1</strong>')
      .replace(/__([^_\n]+)__/g, '<strong>$1</strong>')
      .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, '$1<em>$2</em>')
      .replace(/(^|[^_\w])_([^_\n]+)_(?!\w)/g, '$1<em>$2</em>')
      .replace(/~~([^~\n]+)~~/g, '<del>$1</del>');
    return t.replace(/\u0000(\d+)\u0000/g, (_, i) => '<code>' + codes[+i] + '</code>');
  }

  const cells = (line) => line.trim().replace(/^\||\|$/g, '').split('|').map((c) => c.trim());

  function md(src) {
    const lines = esc(src.replace(/\r\n?/g, '\n')).split('\n');
    const out = [];
    let i = 0, para = [];
    const flush = () => { if (para.length) { out.push('<p>' + inline(para.join('<br>')) + '</p>'); para = []; } };
    while (i < lines.length) {
      const line = lines[i];
      const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
      if (fence) {
        flush();
        const body = [];
        i++;
        while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
        i++;
        const cls = fence[2] ? ' class="lang-' + fence[2] + '"' : '';
        out.push('<pre><code' + cls + '>' + body.join('\n') + '</code></pre>');
        continue;
      }
      if (/^\s*\|.*\|\s*$/.test(line) && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/.test(lines[i + 1])) {
        flush();
        const head = cells(line);
        i += 2;
        let html = '<table><thead><tr>' + head.map((c) => '<th>' + inline(c) + '</th>').join('') + '</tr></thead><tbody>';
        while (i < lines.length && /^\s*\|.*\|\s*$/.test(lines[i])) {
          html += '<tr>' + cells(lines[i]).map((c) => '<td>' + inline(c) + '</td>').join('') + '</tr>';
          i++;
        }
        out.push(html + '</tbody></table>');
        continue;
      }
      const h = line.match(/^(#{1,6})\s+(.*)$/);
      if (h) { flush(); out.push('<h' + h[1].length + '>' + inline(h[2]) + '</h' + h[1].length + '>'); i++; continue; }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { flush(); out.push('<hr>'); i++; continue; }
      if (/^&gt;\s?/.test(line)) {
        flush();
        const q = [];
        while (i < lines.length && /^&gt;\s?/.test(lines[i])) q.push(lines[i++].replace(/^&gt;\s?/, ''));
        out.push('<blockquote>' + inline(q.join('<br>')) + '</blockquote>');
        continue;
      }
      const li = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
      if (li) {
        flush();
        const ordered = /\d/.test(li[1]);
        const items = [];
        while (i < lines.length) {
          const m = lines[i].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
          if (!m || /\d/.test(m[1]) !== ordered) break;
          items.push('<li>' + inline(m[2]) + '</li>');
          i++;
        }
        out.push((ordered ? '<ol>' : '<ul>') + items.join('') + (ordered ? '</ol>' : '</ul>'));
        continue;
      }
      if (!line.trim()) { flush(); i++; continue; }
      para.push(line);
      i++;
    }
    flush();
    return out.join('');
  }
  window.nanobotMarkdown = md; // for tests

  // ---------- rendering ----------
  const atBottom = () => log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  function add(el) { const stick = atBottom(); log.appendChild(el); if (stick) log.scrollTop = log.scrollHeight; return el; }
  function bubble(cls, text, markdown) {
    const d = document.createElement('div');
    d.className = 'msg ' + cls;
    if (markdown) d.innerHTML = md(text); else d.textContent = text;
    return add(d);
  }
  function toolRow(text) {
    const d = document.createElement('details');
    d.className = 'tool';
    const s = document.createElement('summary');
    s.textContent = '🔧 ' + text.split('\n')[0].slice(0, 80);
    const pre = document.createElement('pre');
    pre.textContent = text;
    d.append(s, pre);
    return add(d);
  }
  function userBubble(text, images, forkIndex) {
    const d = bubble('user', text, false);
    if (forkIndex !== undefined && !state.readonly && !state.temporary) {
      // 0.3.5's fork: a new chat with everything before this user message.
      const f = document.createElement('button');
      f.type = 'button'; f.className = 'fork'; f.textContent = 'fork'; f.title = 'Fork: a new chat with everything before this message';
      f.addEventListener('click', () => send({ type: 'fork_chat', source_chat_id: state.chat, before_user_index: forkIndex }));
      d.appendChild(f);
    }
    for (const src of images || []) {
      if (!/^data:image\//.test(src)) continue;
      const img = document.createElement('img');
      img.src = src; img.alt = 'attachment';
      d.appendChild(img);
    }
  }
  function setRunning(on) {
    state.running = on;
    stopBtn.hidden = !on;
    sendBtn.hidden = on && !input.value.trim();
  }
  function status(text, ok) { const s = $('status'); s.textContent = text; s.className = 'status' + (ok ? ' ok' : ''); }

  // ---------- connection ----------
  async function bootstrap() {
    const secret = sessionStorage.getItem('nanobot.secret');
    const headers = secret ? { 'X-Nanobot-Auth': secret } : {};
    const r = await fetch('/webui/bootstrap', { headers, cache: 'no-store', credentials: 'omit' });
    if (r.status === 401 || r.status === 403) {
      const dlg = $('auth');
      if (!dlg.open) dlg.showModal();
      throw new Error('auth');
    }
    if (!r.ok) throw new Error('bootstrap ' + r.status);
    return r.json();
  }
  $('auth-form').addEventListener('submit', () => {
    sessionStorage.setItem('nanobot.secret', $('auth-secret').value);
    state.retry = 0;
    connect();
  });

  async function connect() {
    status('connecting…');
    let boot;
    try { boot = await bootstrap(); } catch (e) { return reconnectLater(e.message === 'auth'); }
    const url = new URL(boot.ws_url, location.href);
    url.searchParams.set('client_id', 'webui');
    if (boot.token) url.searchParams.set('token', boot.token);
    state.apiToken = boot.api_token || null;
    const ws = new WebSocket(url.href);
    state.ws = ws;
    ws.onopen = () => { state.retry = 0; status('connected', true); };
    ws.onclose = () => { if (state.ws === ws) { state.ws = null; setRunning(false); reconnectLater(false); } };
    ws.onmessage = (e) => { try { onEvent(JSON.parse(e.data)); } catch (err) { console.error(err); } };
  }
  function reconnectLater(waitForUser) {
    status(waitForUser ? 'token needed' : 'disconnected');
    if (waitForUser) return;
    const delay = Math.min(10000, 500 * 2 ** state.retry++);
    setTimeout(connect, delay);
  }
  function send(obj) { if (state.ws && state.ws.readyState === 1) { state.ws.send(JSON.stringify(obj)); return true; } return false; }
  // Reads go over HTTP as in 0.3.5 (`/api/…` with the bootstrap's api_token); without one (behind a trusted
  // proxy) over the socket.
  async function apiGet(path, action, payload) {
    if (!state.apiToken) return request(action, payload);
    const r = await fetch(path, { headers: { Authorization: 'Bearer ' + state.apiToken }, cache: 'no-store', credentials: 'omit' });
    if (!r.ok) throw new Error('HTTP ' + r.status);
    return r.json();
  }
  function request(action, payload) {
    return new Promise((resolve, reject) => {
      const id = 'r' + (++state.reqSeq);
      state.pending.set(id, { resolve, reject });
      if (!send({ type: 'webui_request', request_id: id, action, payload: payload || {} })) {
        state.pending.delete(id);
        reject(new Error('not connected'));
      }
    });
  }

  function onEvent(ev) {
    switch (ev.event) {
      case 'ready': {
        const saved = localStorage.getItem('nanobot.chat');
        if (saved && saved !== state.chat) openChat(saved, true); else if (!state.chat) setChat(ev.chat_id);
        else send({ type: 'attach', chat_id: state.chat });
        loadCommands();
        refreshSessions();
        return;
      }
      case 'attached':
        if (ev.temporary) { state.temporary = ev.chat_id; setChat(ev.chat_id, false, true); log.replaceChildren(); bubble('note', 'Temporary chat: it is deleted when you leave it.', false); return; }
        if (ev.forked_from) { openChat(ev.chat_id, true); refreshSessions(); return; }
        if (state.expectNew) { state.expectNew = false; setChat(ev.chat_id); log.replaceChildren(); refreshSessions(); }
        return;
      case 'temporary_chat_discarded': refreshSessions(); return;
      case 'webui_response': {
        const p = state.pending.get(ev.request_id);
        if (!p) return;
        state.pending.delete(ev.request_id);
        if (ev.ok) p.resolve(ev.result); else p.reject(new Error((ev.error && ev.error.message) || 'failed'));
        return;
      }
    }
    if (ev.chat_id && ev.chat_id !== state.chat) { if (ev.event === 'stream_end' || ev.event === 'message') refreshSessions(); return; }
    switch (ev.event) {
      case 'delta': {
        let s = state.streams.get(ev.stream_id);
        if (!s) { s = { text: '', el: bubble('bot streaming', '', true) }; state.streams.set(ev.stream_id, s); }
        s.text += ev.text || '';
        if (!s.raf) s.raf = requestAnimationFrame(() => { s.raf = 0; const stick = atBottom(); s.el.innerHTML = md(s.text); if (stick) log.scrollTop = log.scrollHeight; });
        setRunning(true);
        return;
      }
      case 'stream_end': {
        const s = state.streams.get(ev.stream_id);
        const text = typeof ev.text === 'string' ? ev.text : s ? s.text : '';
        if (s) { if (s.raf) cancelAnimationFrame(s.raf); s.el.classList.remove('streaming'); s.el.innerHTML = md(text); state.streams.delete(ev.stream_id); }
        else if (text) bubble('bot', text, true);
        setRunning(false);
        refreshSessions();
        return;
      }
      case 'message':
        if (ev.kind === 'tool_hint') { toolRow(ev.text || ''); setRunning(true); return; }
        if (ev.kind === 'progress') { bubble('progress', ev.text || '', false); setRunning(true); return; }
        bubble('bot', ev.text || '', true);
        setRunning(false);
        refreshSessions();
        return;
      case 'error':
        bubble('error', ev.detail + (ev.reason ? ': ' + ev.reason : ''), false);
        setRunning(false);
        return;
    }
  }

  // ---------- sessions ----------
  // Leaving a temporary chat discards it (0.3.5: `discard_temporary_chat`).
  function leaveTemporary(next) {
    if (state.temporary && state.temporary !== next) {
      send({ type: 'discard_temporary_chat', chat_id: state.temporary });
      state.temporary = null;
    }
  }
  function setChat(id, readonly, temporary) {
    leaveTemporary(id);
    state.chat = id;
    state.readonly = !!readonly;
    state.streams.clear();
    input.disabled = state.readonly;
    input.placeholder = state.readonly ? 'This session belongs to another channel (read-only)' : 'Message nanobot — / for commands';
    if (!readonly && !temporary) localStorage.setItem('nanobot.chat', id);
    for (const li of $('sessions').children) li.classList.toggle('on', li.dataset.chat === id || li.dataset.key === id);
  }
  async function openChat(chatOrKey, isChat) {
    const key = isChat ? 'websocket:' + chatOrKey : chatOrKey;
    const chat = isChat ? chatOrKey : (chatOrKey.startsWith('websocket:') ? chatOrKey.slice(10) : null);
    log.replaceChildren();
    setRunning(false);
    if (chat) { setChat(chat); send({ type: 'attach', chat_id: chat }); } else setChat(key, true);
    try {
      const r = await apiGet('/api/sessions/' + encodeURIComponent(key) + '/webui-thread', 'session.messages', { key });
      renderHistory(r.messages || []);
    } catch (e) { bubble('error', 'history: ' + e.message, false); }
  }
  function textOf(content) {
    if (typeof content === 'string') return content;
    if (Array.isArray(content)) return content.filter((p) => p && p.type === 'text').map((p) => p.text).join('\n');
    return '';
  }
  function renderHistory(messages) {
    let users = 0;
    for (const m of messages) {
      if (m.role === 'user') userBubble(textOf(m.content).replace(/\[(image|file): [^\]\n]*\]/g, '[$1]'), [], users++);
      else if (m.role === 'assistant') {
        if (Array.isArray(m.tool_calls)) for (const c of m.tool_calls) toolRow((c.function && c.function.name || 'tool') + '(' + (c.function && c.function.arguments || '') + ')');
        const t = textOf(m.content);
        if (t) bubble('bot', t, true);
      }
    }
    log.scrollTop = log.scrollHeight;
  }
  let searchTimer = 0;
  async function refreshSessions() {
    let rows;
    const q = $('search').value;
    try { rows = (await apiGet('/api/sessions?query=' + encodeURIComponent(q), 'sessions.list', { query: q })).sessions || []; } catch { return; }
    const ul = $('sessions');
    ul.replaceChildren();
    for (const s of rows) {
      const li = document.createElement('li');
      li.dataset.key = s.key;
      if (s.chat_id) li.dataset.chat = s.chat_id;
      const title = document.createElement('span');
      title.textContent = s.title || (s.chat_id ? 'New chat' : s.key);
      title.title = s.key;
      const small = document.createElement('small');
      small.textContent = s.chat_id ? '' : s.key.split(':')[0];
      const del = document.createElement('button');
      del.type = 'button'; del.textContent = '✕'; del.title = 'Delete';
      del.addEventListener('click', async (e) => {
        e.stopPropagation();
        if (!confirm('Delete this session?')) return;
        try { await request('session.delete', { key: s.key }); } catch (err) { bubble('error', err.message, false); }
        if (li.classList.contains('on')) newChat();
        refreshSessions();
      });
      li.append(title, small, del);
      li.classList.toggle('on', s.chat_id === state.chat || s.key === state.chat);
      li.addEventListener('click', () => { showView('chat'); s.chat_id ? openChat(s.chat_id, true) : openChat(s.key, false); });
      ul.appendChild(li);
    }
  }
  function newChat() { state.expectNew = true; send({ type: 'new_chat' }); showView('chat'); }
  $('new-chat').addEventListener('click', newChat);
  $('temp-chat').addEventListener('click', () => { send({ type: 'new_temporary_chat' }); showView('chat'); });
  $('search').addEventListener('input', () => { clearTimeout(searchTimer); searchTimer = setTimeout(refreshSessions, 200); });

  // ---------- composer ----------
  async function loadCommands() {
    try { state.commands = (await apiGet('/api/commands', 'commands.list')).commands || []; } catch { state.commands = []; }
  }
  function slashMatches() {
    const v = input.value;
    if (!v.startsWith('/') || v.includes(' ') || v.includes('\n')) return [];
    return state.commands.filter((c) => c.name.startsWith(v));
  }
  function renderSlash() {
    const ul = $('slash');
    const list = slashMatches();
    ul.hidden = !list.length;
    ul.replaceChildren();
    state.slashIdx = Math.min(state.slashIdx, Math.max(0, list.length - 1));
    list.forEach((c, i) => {
      const li = document.createElement('li');
      li.textContent = c.name;
      const d = document.createElement('small');
      d.textContent = c.description;
      li.appendChild(d);
      li.classList.toggle('on', i === state.slashIdx);
      li.addEventListener('mousedown', (e) => { e.preventDefault(); input.value = c.name; renderSlash(); input.focus(); });
      ul.appendChild(li);
    });
  }
  input.addEventListener('input', () => {
    input.style.height = 'auto';
    input.style.height = input.scrollHeight + 'px';
    state.slashIdx = 0;
    renderSlash();
    if (state.running) sendBtn.hidden = !input.value.trim();
  });
  input.addEventListener('keydown', (e) => {
    const list = slashMatches();
    if (list.length && (e.key === 'ArrowDown' || e.key === 'ArrowUp')) {
      e.preventDefault();
      state.slashIdx = (state.slashIdx + (e.key === 'ArrowDown' ? 1 : list.length - 1)) % list.length;
      renderSlash();
      return;
    }
    if (list.length && e.key === 'Tab') { e.preventDefault(); input.value = list[state.slashIdx].name; renderSlash(); return; }
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); $('composer').requestSubmit(); }
  });
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if ((!text && !state.files.length) || state.readonly) return;
    const media = state.files.map((f) => ({ data_url: f.url, name: f.name }));
    const turn = 'u' + Date.now().toString(36) + Math.random().toString(36).slice(2, 6);
    const msg = { type: 'message', chat_id: state.chat, content: text, webui: true, turn_id: turn };
    if (media.length) msg.media = media;
    if (!send(msg)) { bubble('error', 'not connected', false); return; }
    userBubble(text, state.files.map((f) => f.url));
    input.value = '';
    input.style.height = 'auto';
    state.files = [];
    renderFiles();
    renderSlash();
    if (text !== '/stop') setRunning(true);
  });
  stopBtn.addEventListener('click', () => { send({ type: 'message', chat_id: state.chat, content: '/stop', webui: true }); });

  const MAX_FILES = 4, MAX_BYTES = 6 * 1024 * 1024;
  $('file').addEventListener('change', (e) => {
    for (const f of e.target.files) {
      if (state.files.length >= MAX_FILES) { bubble('error', 'at most ' + MAX_FILES + ' attachments', false); break; }
      if (f.size > MAX_BYTES) { bubble('error', f.name + ' is larger than 6 MB', false); continue; }
      const r = new FileReader();
      r.onload = () => { state.files.push({ name: f.name, url: r.result }); renderFiles(); };
      r.readAsDataURL(f);
    }
    e.target.value = '';
  });
  function renderFiles() {
    const box = $('attachments');
    box.replaceChildren();
    state.files.forEach((f, i) => {
      const s = document.createElement('span');
      if (/^data:image\//.test(f.url)) { const img = document.createElement('img'); img.src = f.url; img.alt = ''; s.appendChild(img); }
      s.appendChild(document.createTextNode(' ' + f.name + ' '));
      const x = document.createElement('button');
      x.type = 'button'; x.textContent = '✕';
      x.addEventListener('click', () => { state.files.splice(i, 1); renderFiles(); });
      s.appendChild(x);
      box.appendChild(s);
    });
  }

  // ---------- memory and cron (read-only) ----------
  function showView(name) {
    for (const b of document.querySelectorAll('.views button')) b.classList.toggle('on', b.dataset.view === name);
    for (const v of ['chat', 'memory', 'cron', 'settings']) $('view-' + v).hidden = v !== name;
    if (name === 'memory') loadMemory();
    if (name === 'cron') loadCron();
    if (name === 'settings') loadSettings();
  }
  for (const b of document.querySelectorAll('.views button')) b.addEventListener('click', () => showView(b.dataset.view));
  async function loadMemory() {
    const v = $('view-memory');
    try {
      const [m, h] = await Promise.all([request('memory.read'), request('history.read', { limit: 100 })]);
      v.innerHTML = '<h2>MEMORY.md</h2>' + (m.text ? md(m.text) : '<p>(empty)</p>') + '<h2>History</h2>';
      const ul = document.createElement('ul');
      for (const e of (h.entries || []).slice().reverse()) {
        const li = document.createElement('li');
        li.textContent = (e.timestamp ? e.timestamp + ' — ' : '') + (e.summary || e.content || e.text || JSON.stringify(e));
        ul.appendChild(li);
      }
      v.appendChild(ul);
    } catch (e) { v.textContent = 'Cannot read memory: ' + e.message; }
  }
  async function loadCron() {
    const v = $('view-cron');
    try {
      const jobs = (await request('cron.list')).jobs || [];
      v.innerHTML = '<h2>Cron jobs</h2>';
      if (!jobs.length) { v.appendChild(document.createTextNode('No jobs.')); return; }
      const t = document.createElement('table');
      const head = t.insertRow();
      for (const h of ['Name', 'Schedule', 'Enabled', 'Next run', 'Message']) { const th = document.createElement('th'); th.textContent = h; head.appendChild(th); }
      for (const j of jobs) {
        const s = j.schedule || {};
        const sched = s.kind === 'cron' ? s.expr + (s.tz ? ' (' + s.tz + ')' : '') : s.kind === 'every' ? 'every ' + Math.round((s.everyMs || 0) / 1000) + ' s' : s.kind === 'at' ? 'at ' + new Date(s.atMs).toLocaleString() : JSON.stringify(s);
        const next = j.state && j.state.nextRunAtMs ? new Date(j.state.nextRunAtMs).toLocaleString() : '';
        const row = t.insertRow();
        for (const c of [j.name || j.id, sched, j.enabled === false ? 'no' : 'yes', next, (j.payload && j.payload.message) || '']) row.insertCell().textContent = c;
      }
      v.appendChild(t);
    } catch (e) { v.textContent = 'Cannot read cron jobs: ' + e.message; }
  }

  // Read-only settings (0.3.5's GET /api/settings; edit config.json to change them).
  async function loadSettings() {
    const v = $('view-settings');
    try {
      const s = await apiGet('/api/settings', 'settings.read');
      v.innerHTML = '<h2>Settings</h2>';
      const t = document.createElement('table');
      const a = s.agent || {};
      for (const [k, val] of [['Model', a.model], ['Provider', a.provider], ['API key set', a.has_api_key ? 'yes' : 'no'],
        ['Max tokens', a.max_tokens], ['Context window', a.context_window_tokens], ['Temperature', a.temperature],
        ['Reasoning effort', a.reasoning_effort || ''], ['Timezone', a.timezone]]) {
        const row = t.insertRow();
        row.insertCell().textContent = k;
        row.insertCell().textContent = val === undefined || val === null ? '' : String(val);
      }
      v.appendChild(t);
      const note = document.createElement('p');
      note.textContent = 'Read-only here: change them in config.json.';
      v.appendChild(note);
    } catch (e) { v.textContent = 'Cannot read settings: ' + e.message; }
  }

  // ---------- theme ----------
  const root = document.documentElement;
  const savedTheme = localStorage.getItem('nanobot.theme');
  root.dataset.theme = savedTheme || (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light');
  $('theme').addEventListener('click', () => {
    root.dataset.theme = root.dataset.theme === 'dark' ? 'light' : 'dark';
    localStorage.setItem('nanobot.theme', root.dataset.theme);
  });

  connect();
})();
