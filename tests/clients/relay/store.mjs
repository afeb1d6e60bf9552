// relay-runtime's store with the artifacts relay-compiler made from
// relay/PlaylistView.js, against a running Chorus:
//   node relay/store.mjs URL TOKEN PLAYLIST_ID
// Reads the playlist's entries connection, adds an entry (@appendNode) and
// removes two (@deleteRecord on removedEntryIds), and prints one JSON line of
// what the store holds after each step (driven by tests/e2e/test_clients.py).
import {
  ConnectionHandler,
  Environment,
  Network,
  RecordSource,
  Store,
  commitMutation,
  createOperationDescriptor,
  fetchQuery,
  getRequest,
} from "relay-runtime";
import AddMutation from "./__generated__/PlaylistViewAddMutation.graphql.js";
import PageQuery from "./__generated__/PlaylistViewQuery.graphql.js";
import RemoveMutation from "./__generated__/PlaylistViewRemoveMutation.graphql.js";

const [url, token, playlistId] = process.argv.slice(2);

const network = Network.create(async (params, variables) => {
  const response = await fetch(url, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ query: params.text, variables }),
  });
  return response.json();
});
const environment = new Environment({ network, store: new Store(new RecordSource()) });
const source = () => environment.getStore().getSource();

function commit(mutation, variables) {
  return new Promise((resolve, reject) =>
    commitMutation(environment, {
      mutation,
      variables,
      onCompleted: (response, errors) => (errors ? reject(new Error(JSON.stringify(errors))) : resolve(response)),
      onError: reject,
    }),
  );
}

// The node ids of the connection's edges whose node record is still there.
// @deleteRecord alone leaves the edge, its node dangling (read as null): an
// app adds @deleteEdge(connections: …) beside it (docs/clients.md).
function shown(connectionId) {
  const connection = source().get(connectionId);
  return connection.edges.__refs
    .map((ref) => source().get(source().get(ref).node.__ref))
    .filter(Boolean)
    .map((node) => node.id);
}

const variables = { id: playlistId };
environment.retain(createOperationDescriptor(getRequest(PageQuery), variables));
await fetchQuery(environment, PageQuery, variables).toPromise();
const connectionId = ConnectionHandler.getConnectionID(playlistId, "PlaylistView_entries");
const before = shown(connectionId);
const base = source().get(playlistId).version;

const added = await commit(AddMutation, {
  input: { playlistId, operationId: `relay-add-${Date.now()}`, baseVersion: base, mediaIds: ["chinook:track:7"] },
  connections: [connectionId],
});
const afterAdd = shown(connectionId);

const targets = [before[0], added.addEntries.entries[0].id];
const removed = await commit(RemoveMutation, {
  input: { playlistId, operationId: `relay-remove-${Date.now()}`, baseVersion: added.addEntries.version, entryIds: targets },
});
const afterRemove = shown(connectionId);

console.log(
  JSON.stringify({
    before,
    added: added.addEntries.entries.map((e) => e.id),
    afterAdd,
    removedEntryIds: removed.removeEntries.removedEntryIds,
    afterRemove,
    // @deleteRecord leaves null in place of each record it deleted.
    records: Object.fromEntries(targets.map((id) => [id, source().get(id) ?? null])),
    media: source().get("chinook:track:7")?.__typename ?? null,
  }),
);
