// Two pages of the reference web client (/web/) in Debian's Chromium edit one
// playlist at once: driven by tests/e2e/test_web_client.py.
//
//   node webclient.mjs <server base URL> <playlist id> <artefacts dir> <edits> <token>...
//
// Each token is one page (one user). Every page clicks `edits` random edits
// (add a searched media, move up or down, remove) as fast as the page
// answers, without waiting for the others; halfway, page 2's socket is cut
// (it must reconnect from its last applied version). Then every page must
// settle: nothing pending, the same version, the same order. Prints one JSON
// object per step; on failure screenshots every page into the artefacts dir.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [base, playlistId, artefacts, editsArg, ...tokens] = process.argv.slice(2);
const edits = Number(editsArg);
const say = (step, extra = {}) => console.log(JSON.stringify({ step, ...extra }));
const origin = new URL(base).host;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const pages = [];
const logs = [];
const leaked = []; // requests whose URL carries a token (the server would log it)
let seed = 42; // a fixed sequence of choices: a failure can be run again
const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);

async function openPage(token, n) {
  const context = await browser.newContext(); // its own storage: its own user
  const page = await context.newPage();
  await page.addInitScript(() => {
    window.cspViolations = [];
    document.addEventListener("securitypolicyviolation", (e) =>
      window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  page.on("console", (m) => logs.push(`page ${n} ${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => logs.push(`page ${n} pageerror: ${e.message}`));
  page.on("request", (r) => { if (r.url().includes(token)) leaked.push(r.url().slice(0, 80)); });
  await page.route("**/*", (route) =>
    new URL(route.request().url()).host === origin ? route.continue() : route.abort());
  await page.goto(`${base}/web/?playlist=${encodeURIComponent(playlistId)}#token=${token}`);
  await page.waitForFunction(() => document.getElementById("status").dataset.state === "live",
    null, { timeout: 20000 });
  return page;
}

async function tryEdit(page) {
  const rows = page.locator("#entries li:not(.pending)");
  const count = await rows.count();
  const choice = random();
  if (count < 3 || choice < 0.4) {
    await page.fill("#query", ["black", "love", "rock", "night"][Math.floor(random() * 4)]);
    await page.click("#search button");
    const adds = page.locator("#results li button");
    await adds.first().waitFor({ timeout: 10000 });
    await adds.nth(Math.floor(random() * (await adds.count()))).click({ timeout: 2000 });
    return "add";
  }
  // Locators, not handles: the list is drawn again whenever a version lands.
  const row = rows.nth(Math.floor(random() * count));
  const [kind, index] = choice < 0.55 ? ["remove", 2] : choice < 0.8 ? ["up", 0] : ["down", 1];
  const button = row.locator("button").nth(index);
  if (await button.isDisabled({ timeout: 2000 })) {
    await row.locator("button").nth(2).click({ timeout: 2000 });
    return "remove";
  }
  await button.click({ timeout: 2000 });
  return kind;
}

async function oneEdit(page) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await tryEdit(page);
    } catch (error) {
      // The row went away under the pointer (someone else removed it): choose again.
      if (attempt >= 5) throw error;
    }
  }
}

const settled = (page) => page.evaluate(() => {
  const s = window.chorusSession();
  return { version: s.version, pending: s.pending.length, status: s.status,
           order: [...document.querySelectorAll("#entries li")].map((li) => li.dataset.id),
           presence: Object.fromEntries([...s.presence].map(([user, p]) => [user, p.state])),
           violations: window.cspViolations };
});

// A page framing the client: the browser must refuse to show it. The framing
// page is made up at the server's own origin (frame-ancestors 'none' and DENY
// refuse every framer, that one too); one of another origin could not be used
// here: Chromium refuses a made-up page's frame of 127.0.0.1 whatever the headers.
async function framedElsewhere() {
  const context = await browser.newContext();
  const page = await context.newPage();
  const framer = new URL("/framer", base);
  await page.route(framer.href, (route) => route.fulfill({
    contentType: "text/html",
    body: `<iframe src="${base}/web/" width="800" height="600"></iframe>`,
  }));
  await page.goto(framer.href);
  const frame = await (await page.waitForSelector("iframe")).contentFrame();
  await frame.waitForLoadState("load", { timeout: 10000 }).catch(() => {});
  const client = await frame.evaluate(() => document.getElementById("status") !== null)
    .catch(() => false);
  await context.close();
  return { client };
}

try {
  for (const [n, token] of tokens.entries()) pages.push(await openPage(token, n + 1));
  say("opened", { pages: pages.length });
  const done = {};
  await Promise.all(pages.map(async (page, n) => {
    for (let i = 0; i < edits; i++) {
      if (n === 1 && i === Math.floor(edits / 2)) {
        // Cut page 2's socket as a network would: it reconnects on its own.
        await page.evaluate(() => window.chorusSession().socket.terminate());
      }
      const kind = await oneEdit(page);
      done[kind] = (done[kind] ?? 0) + 1;
    }
  }));
  say("edited", { done });
  // Let every page catch up: nothing pending, live, the same version.
  const deadline = Date.now() + 30000;
  let states;
  for (;;) {
    states = await Promise.all(pages.map(settled));
    const versions = new Set(states.map((s) => s.version));
    if (states.every((s) => s.pending === 0 && s.status === "live") && versions.size === 1) break;
    if (Date.now() > deadline) throw new Error(`pages did not settle: ${JSON.stringify(states.map(({ order, ...s }) => s))}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  say("settled", { states, leaked, violations: states.map((s) => s.violations) });
  say("framed", await framedElsewhere());
  await browser.close();
} catch (error) {
  mkdirSync(artefacts, { recursive: true });
  for (const [n, page] of pages.entries()) {
    await page.screenshot({ path: join(artefacts, `web-client-${n + 1}.png`), fullPage: true }).catch(() => {});
  }
  say("failed", { error: String(error), logs: logs.slice(-30) });
  await browser.close();
  process.exit(1);
}
