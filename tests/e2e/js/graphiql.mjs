// GraphiQL in Debian's Chromium, offline: driven by tests/e2e/test_graphiql.py.
//
//   node graphiql.mjs <server base URL> <token> <playlist id> <artefacts dir>
//
// Every request to another host is aborted (and counted), as on a machine
// without internet. The page must load from the server alone, run a query
// with the token from the Headers editor, and run a subscription over
// graphql-transport-ws that shows a commit made meanwhile. Prints one JSON
// object per step on stdout; on failure saves a screenshot and the page's
// console in the artefacts dir and exits 1.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [base, token, playlistId, artefacts] = process.argv.slice(2);
const origin = new URL(base).host;
const say = (step, extra = {}) => console.log(JSON.stringify({ step, ...extra }));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  headless: true,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
const page = await browser.newPage();
const consoleLines = [];
page.on("console", (m) => consoleLines.push(`${m.type()}: ${m.text()}`));
page.on("pageerror", (e) => consoleLines.push(`pageerror: ${e.message}`));
const external = [];
await page.route("**/*", (route) => {
  const url = new URL(route.request().url());
  if (url.host === origin || url.protocol === "data:") return route.continue();
  external.push(url.href);
  return route.abort("internetdisconnected");
});

// CodeMirror 5 keeps its editor object on its element; GraphiQL 3 has one per pane.
// GraphiQL reads the operation's name from the editor after a debounce: a
// click right after setValue would send the previous operation's name.
const setEditor = async (selector, text) => {
  await page.evaluate(([s, t]) => document.querySelector(s).CodeMirror.setValue(t), [selector, text]);
  await page.waitForTimeout(600);
};
const result = () =>
  page.evaluate(() => document.querySelector(".result-window .CodeMirror").CodeMirror.getValue());
// A substring, not a predicate: the page's policy allows no eval.
const waitForResult = (needle, timeout) =>
  page.waitForFunction(
    (n) => (document.querySelector(".result-window .CodeMirror")?.CodeMirror.getValue() ?? "").includes(n),
    needle,
    { timeout },
  );
const refused = [];
page.on("response", async (r) => {
  if (r.status() >= 400) {
    refused.push({ url: r.url(), status: r.status(), body: (await r.text().catch(() => "")).slice(0, 300),
                   request: (r.request().postData() ?? "").slice(0, 300) });
  }
});

try {
  const response = await page.goto(`${base}/graphql`, { waitUntil: "load" });
  say("loaded", {
    status: response.status(),
    csp: response.headers()["content-security-policy"] ?? null,
  });
  await page.waitForSelector(".graphiql-query-editor .CodeMirror", { timeout: 20000 });
  await page.waitForSelector(".graphiql-editor-tool .CodeMirror", { state: "attached", timeout: 20000 });
  say("rendered", { title: await page.title() });

  // The Headers editor is the open tool (defaultEditorToolsVisibility).
  await page.evaluate((headers) => {
    const editors = [...document.querySelectorAll(".graphiql-editor-tool .graphiql-editor")];
    const shown = editors.find((e) => !e.classList.contains("hidden"));
    shown.querySelector(".CodeMirror").CodeMirror.setValue(headers);
  }, JSON.stringify({ Authorization: `Bearer ${token}` }));

  await setEditor(".graphiql-query-editor .CodeMirror",
    "query Viewer { viewer { user { id } playlists(first: 5) { totalCount } } }");
  await page.click(".graphiql-execute-button");
  await waitForResult('"viewer"', 20000);
  say("query", { result: JSON.parse(await result()) });

  await setEditor(".graphiql-query-editor .CodeMirror",
    `subscription Events { playlistEvents(playlistId: "${playlistId}", sinceVersion: 0) {` +
    " __typename ... on PlaylistChanged { version } } }");
  await page.click(".graphiql-execute-button");
  // The stream first replays what is committed (version 1: the add the test made).
  await waitForResult('"version": 1', 20000);
  say("subscribed", { result: JSON.parse(await result()) });

  // A commit made now, by someone else, reaches the open subscription.
  const added = await fetch(`${base}/graphql`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
    body: JSON.stringify({
      query: "mutation($i: AddEntriesInput!) { addEntries(input: $i) { version } }",
      variables: { i: { playlistId, operationId: "graphiql-live", baseVersion: 1,
                        mediaIds: ["chinook:track:2"] } },
    }),
  }).then((r) => r.json());
  say("committed", { added });
  await waitForResult('"version": 2', 20000);
  say("live", { result: JSON.parse(await result()), external, refused });
  await browser.close();
} catch (error) {
  mkdirSync(artefacts, { recursive: true });
  await page.screenshot({ path: join(artefacts, "graphiql.png"), fullPage: true }).catch(() => {});
  writeFileSync(join(artefacts, "graphiql-console.txt"), consoleLines.join("\n"));
  say("failed", { error: String(error), external, refused, console: consoleLines.slice(-20) });
  await browser.close();
  process.exit(1);
}
