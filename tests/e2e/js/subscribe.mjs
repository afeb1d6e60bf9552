// Subscribe to playlistEvents with the reference JavaScript client (graphql-ws).
//
//   node subscribe.mjs --url ws://127.0.0.1:8000/graphql --token T \
//        --playlist ID --since 0 --count 5 [--timeout-ms 20000] [--retry-attempts 0]
//
// The token goes in connection_init as {"Authorization": "Bearer T"} (left
// out when --token is not given). Every line on stdout is one JSON object:
//   {"event": {...}}                    one `next` (data.playlistEvents)
//   {"done": N}                         N events arrived: exit 0
//   {"error": [GraphQLFormattedError]}  an `error` message ended it: exit 1
//   {"closed": {"code": C, "reason": R}} the server closed the socket: exit 2
//   {"retrying": {"code": C, "reason": R}} closed, and graphql-ws will retry
//                                       (only with --retry-attempts > 0)
//   {"timeout": ms}                     nothing more within the timeout: exit 3
// Used by tests/e2e/test_subscriptions.py; install with `npm ci --prefix tests/e2e/js`.

import { parseArgs } from "node:util";
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    token: { type: "string" },
    playlist: { type: "string" },
    since: { type: "string", default: "0" },
    count: { type: "string", default: "1" },
    "timeout-ms": { type: "string", default: "20000" },
    "retry-attempts": { type: "string", default: "0" },
  },
});

const QUERY = `subscription Events($playlistId: ID!, $sinceVersion: Int!) {
  playlistEvents(playlistId: $playlistId, sinceVersion: $sinceVersion) {
    __typename
    ... on PlaylistChanged {
      playlistId version operationId actor { id } committedAt
      changes {
        __typename
        ... on EntriesAdded { entries { id positionKey mediaId } }
        ... on EntriesMoved { entries { id positionKey mediaId } }
        ... on EntriesRemoved { entryIds }
        ... on MembersChanged { user { id } role }
      }
    }
    ... on ResyncRequired { playlistId currentVersion reason }
  }
}`;

function emit(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

let finished = false;

function finish(code, line) {
  if (finished) return;
  finished = true;
  emit(line);
  client.dispose();
  // Let stdout drain before leaving.
  process.stdout.write("", () => process.exit(code));
}

const retryAttempts = Number(values["retry-attempts"]);
const client = createClient({
  url: values.url,
  webSocketImpl: WebSocket,
  connectionParams: values.token ? { Authorization: `Bearer ${values.token}` } : {},
  retryAttempts,
  lazy: true,
  on: {
    closed: (event) => {
      if (event && typeof event.code === "number" && event.code !== 1000) {
        const closed = { code: event.code, reason: event.reason };
        // With retries, graphql-ws decides: a fatal code reaches `error` below.
        if (retryAttempts > 0) emit({ retrying: closed });
        else finish(2, { closed });
      }
    },
  },
});

const wanted = Number(values.count);
let received = 0;
const timeoutMs = Number(values["timeout-ms"]);
const timer = setTimeout(() => finish(3, { timeout: timeoutMs }), timeoutMs);

client.subscribe(
  {
    query: QUERY,
    variables: { playlistId: values.playlist, sinceVersion: Number(values.since) },
  },
  {
    next: (result) => {
      if (result.errors) {
        clearTimeout(timer);
        finish(1, { error: result.errors });
        return;
      }
      emit({ event: result.data.playlistEvents });
      received += 1;
      if (received >= wanted) {
        clearTimeout(timer);
        finish(0, { done: received });
      }
    },
    error: (error) => {
      clearTimeout(timer);
      if (Array.isArray(error)) {
        finish(1, { error });
      } else if (error && typeof error.code === "number") {
        finish(2, { closed: { code: error.code, reason: error.reason } });
      } else {
        finish(1, { error: [{ message: String(error) }] });
      }
    },
    complete: () => {
      clearTimeout(timer);
      finish(1, { error: [{ message: `completed after ${received} events` }] });
    },
  },
);
