// The graphql-http package's server audits (GraphQL over HTTP spec) against a
// running Chorus: driven by tests/e2e/test_http_conformance.py.
//
//   node http-audit.mjs <GraphQL URL> <token>
//
// Prints one JSON object per audit: { id, name, status: "ok"|"warn"|"error", reason }.
import { auditServer } from "graphql-http";

const [url, token] = process.argv.slice(2);
const results = await auditServer({
  url,
  fetchFn: (input, init = {}) =>
    fetch(input, { ...init, headers: { ...(init.headers ?? {}), authorization: `Bearer ${token}` } }),
});
for (const r of results) {
  console.log(JSON.stringify({ id: r.id, name: r.name, status: r.status, reason: r.reason ?? null }));
}
