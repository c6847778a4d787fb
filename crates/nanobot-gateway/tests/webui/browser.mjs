// Drives the WebUI in headless Chromium (playwright-core, Debian's chromium). Run by tests/it/webui_browser.rs,
// which starts the gateway and scripts the mock LLM. Env: BASE_URL, CHROMIUM, PLAYWRIGHT_CORE, USER_DATA_DIR,
// SCREENSHOT, IMAGE_PNG. Prints one line per step; exits non-zero on the first failure.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT_CORE);
const base = process.env.BASE_URL;
const step = (s) => console.log('step: ' + s);

const args = ['--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
  '--disable-gpu', '--disable-quic', '--disable-default-apps', '--disable-extensions'];
if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');
const context = await chromium.launchPersistentContext(process.env.USER_DATA_DIR, {
  executablePath: process.env.CHROMIUM, headless: true, args, timeout: 60000,
});
context.setDefaultTimeout(30000);
const page = context.pages()[0] || await context.newPage();
const problems = [];
page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
page.on('pageerror', (e) => problems.push(String(e)));
page.on('request', (r) => { if (!r.url().startsWith(base.replace(/\/$/, '')) && !r.url().startsWith('ws://') && !r.url().startsWith('data:')) problems.push('external request: ' + r.url()); });

// Session reads go over 0.3.5's HTTP API (`/api/…` with the bootstrap's api_token).
const apiCalls = [];
page.on('request', (r) => { const u = new URL(r.url()); if (u.pathname.startsWith('/api/')) apiCalls.push(r.method() + ' ' + u.pathname); });

async function say(text) {
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
}
const lastBot = () => page.locator('#log .msg.bot').last();

let failed = false;
try {
  step('open');
  await page.goto(base);
  await page.waitForSelector('#status.ok');

  step('streamed markdown answer');
  await say('hello there');
  await page.waitForSelector('#log .msg.user >> text=hello there');
  await page.waitForSelector('#log .msg.bot table td >> text=42');
  await page.waitForSelector('#log .msg.bot pre code');
  await page.waitForFunction(() => !document.querySelector('#log .msg.bot.streaming')
    && document.getElementById('log').textContent.includes('stays text.'));
  const strong = await lastBot().locator('strong').first().textContent();
  if (strong !== 'Hi!') throw new Error('bold text rendered as ' + strong);
  if (await page.locator('#log img[src="x"]').count()) throw new Error('raw HTML from the model was rendered');
  const raw = await lastBot().textContent();
  if (!raw.includes('<img src=x onerror=alert(1)>')) throw new Error('HTML in the answer should show as text: ' + raw);
  await page.waitForSelector('details.tool summary >> text=list_dir');

  step('sessions: new, switch, search');
  await page.waitForSelector('#sessions li >> text=hello there');
  await page.click('#new-chat');
  await page.waitForFunction(() => document.querySelectorAll('#log .msg').length === 0);
  await say('second chat');
  await page.waitForSelector('#log .msg.bot >> text=Second answer');
  await page.waitForSelector('#sessions li >> text=second chat');
  await page.click('#sessions li >> text=hello there');
  await page.waitForSelector('#log .msg.user >> text=hello there');
  await page.waitForSelector('#log .msg.bot table');
  if (await page.locator('#log >> text=Second answer').count()) throw new Error('sessions mixed');
  await page.fill('#search', 'second');
  await page.waitForFunction(() => [...document.querySelectorAll('#sessions li')].every((li) => li.textContent.includes('second')));
  await page.fill('#search', '');
  await page.click('#sessions li >> text=second chat');
  await page.waitForSelector('#log .msg.bot >> text=Second answer');
  for (const want of ['GET /api/sessions', 'GET /api/commands']) {
    if (!apiCalls.includes(want)) throw new Error('no ' + want + ' request: ' + apiCalls.join(', '));
  }
  if (!apiCalls.some((c) => /^GET \/api\/sessions\/websocket%3A[^/]+\/webui-thread$/.test(c))) {
    throw new Error('history not read through /api/sessions/<key>/webui-thread: ' + apiCalls.join(', '));
  }

  step('stop a long turn');
  await say('long task please');
  await page.waitForSelector('#log .msg.bot.streaming >> text=Working');
  await page.waitForSelector('#stop', { state: 'visible' });
  await page.click('#stop');
  await page.waitForSelector('#stop', { state: 'hidden' });

  step('upload an image');
  await page.setInputFiles('#file', { name: 'dot.png', mimeType: 'image/png', buffer: readFileSync(process.env.IMAGE_PNG) });
  await page.waitForSelector('#attachments img');
  await say('describe the image');
  await page.waitForSelector('#log .msg.user img');
  await page.waitForSelector('#log .msg.bot >> text=A tiny red dot');

  step('slash commands');
  await page.fill('#input', '/he');
  await page.waitForSelector('#slash li >> text=/help');
  await page.fill('#input', '');

  step('memory and cron views');
  await page.click('.views button[data-view=memory]');
  await page.waitForSelector('#view-memory li >> text=likes green tea');
  await page.click('.views button[data-view=cron]');
  await page.waitForSelector('#view-cron td >> text=water the plants');
  await page.click('.views button[data-view=settings]');
  await page.waitForSelector('#view-settings td >> text=Model');
  if (!apiCalls.includes('GET /api/settings')) throw new Error('settings not read through GET /api/settings');
  await page.click('.views button[data-view=chat]');

  step('reload keeps the history');
  await page.reload();
  await page.waitForSelector('#status.ok');
  await page.waitForSelector('#log .msg.bot >> text=A tiny red dot');
  await page.waitForSelector('#log .msg.user >> text=second chat');

  step('dark theme');
  await page.click('#theme');
  const theme = await page.evaluate(() => document.documentElement.dataset.theme);
  if (!theme) throw new Error('no theme');
  await page.click('#theme');
  await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });

  step('fork from the second user message');
  await page.waitForSelector('#log .msg.user >> text=long task please');
  await page.locator('#log .msg.user').nth(1).locator('.fork').click();
  await page.waitForFunction(() => {
    const users = [...document.querySelectorAll('#log .msg.user')];
    return users.length === 1 && users[0].textContent.includes('second chat')
      && document.getElementById('log').textContent.includes('Second answer');
  });
  if (await page.locator('#log >> text=A tiny red dot').count()) throw new Error('the fork copied later messages');
  await say('after the fork');
  await page.waitForSelector('#log .msg.bot >> text=ok');
  await page.waitForFunction(() => [...document.querySelectorAll('#sessions li')].filter((li) => li.textContent.includes('second chat')).length === 2);

  step('temporary chat');
  await page.click('#temp-chat');
  await page.waitForSelector('#log .msg.note');
  await say('temporary secret');
  await page.waitForSelector('#log .msg.bot >> text=ok');
  await page.waitForSelector('#sessions li >> text=temporary secret');
  await page.click('#new-chat');
  await page.waitForFunction(() => ![...document.querySelectorAll('#sessions li')].some((li) => li.textContent.includes('temporary secret')));

  if (problems.length) throw new Error('page problems: ' + problems.join(' | '));
  console.log('OK');
} catch (e) {
  failed = true;
  console.error('FAILED: ' + (e && e.stack || e));
  try { await page.screenshot({ path: process.env.SCREENSHOT.replace(/\.png$/, '-failure.png'), fullPage: true }); } catch {}
  if (problems.length) console.error('page problems: ' + problems.join(' | '));
} finally {
  await context.close();
}
process.exit(failed ? 1 : 0);
