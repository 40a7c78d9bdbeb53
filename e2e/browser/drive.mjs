// Drives Debian's headless chromium for the replay-ring e2e tests.
//
// Protocol: one JSON command per stdin line, one JSON reply per stdout line, in order.
//   {"cmd":"goto","url":U}            -> {"ok":true}
//   {"cmd":"state"}                   -> {"ok":true,"replay":window.__replay,"text":{received:..,...}}
//   {"cmd":"eval","expr":E}           -> {"ok":true,"value":<JSON of E>}
//   {"cmd":"screenshot","path":P}     -> {"ok":true}
//   {"cmd":"quit"}                    -> {"ok":true}, then exit
// Any failure answers {"ok":false,"error":"..."}. Page console output and errors go to stderr.
// The first line written is {"ready":true,"version":"<browser version>"} once chromium is up.
import { chromium } from 'playwright-core';
import readline from 'node:readline';

const FLAGS = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
  // Keep background-tab style throttling from slowing EventSource timers.
  '--disable-background-timer-throttling', '--disable-renderer-backgrounding',
];
const ELEMENTS = ['received', 'reconnects', 'last-id', 'gaps', 'duplicates', 'error', 'status'];

const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

// playwright-core creates a fresh temporary --user-data-dir for every launch().
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: FLAGS,
});
const page = await browser.newPage();
page.on('console', (m) => process.stderr.write(`[console.${m.type()}] ${m.text()}\n`));
page.on('pageerror', (e) => process.stderr.write(`[pageerror] ${e}\n`));
// Network failures (a truncated event stream, a refused connection): what a stalled test needs.
page.on('requestfailed', (r) => process.stderr.write(`[requestfailed] ${r.url()} ${r.failure()?.errorText}\n`));
out({ ready: true, version: browser.version() });

async function handle(msg) {
  switch (msg.cmd) {
    case 'goto':
      await page.goto(msg.url, { waitUntil: 'domcontentloaded' });
      return {};
    case 'state':
      return await page.evaluate((ids) => {
        const text = {};
        for (const id of ids) {
          const el = document.getElementById(id);
          text[id] = el ? el.textContent : null;
        }
        const r = window.__replay;
        return { replay: r === undefined ? null : JSON.parse(JSON.stringify(r)), text };
      }, ELEMENTS);
    case 'eval':
      return { value: await page.evaluate((e) => JSON.parse(JSON.stringify((0, eval)(e) ?? null)), msg.expr) };
    case 'screenshot':
      await page.screenshot({ path: msg.path, fullPage: true });
      return {};
    case 'quit':
      return {};
    default:
      throw new Error(`unknown command ${msg.cmd}`);
  }
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  let msg;
  try {
    msg = JSON.parse(line);
    out({ ok: true, ...(await handle(msg)) });
  } catch (e) {
    out({ ok: false, error: String(e && e.stack || e) });
  }
  if (msg && msg.cmd === 'quit') break;
}
await browser.close();
process.exit(0);
