// Apollo Client 4 with InMemoryCache against a running Chorus:
//   node apollo/cache.mjs URL TOKEN PLAYLIST_ID
// Reads a page of entries with media, renames the playlist, and prints one
// JSON line: the cache's keys, what the cache says after the mutation, and
// how many HTTP requests were made (driven by tests/e2e/test_clients.py).
import { ApolloClient, HttpLink, InMemoryCache, gql } from "@apollo/client";
import { relayStylePagination } from "@apollo/client/utilities";

const [url, token, playlistId] = process.argv.slice(2);
let requests = 0;

// The cache configuration docs/clients.md recommends.
// PlaylistEntry, Playlist, Media and User are normalised by their `id` with
// no keyFields (Apollo keys them `__typename:id`; Media's id is the catalog's
// String id, unique among Media, which is all Apollo needs). Viewer has no id:
// it is the one viewer of the token, so a singleton. `entries` pages are
// merged by cursor, one list per playlist whatever first/after asked.
export const cache = new InMemoryCache({
  typePolicies: {
    Viewer: { keyFields: [] },
    Playlist: { fields: { entries: relayStylePagination() } },
  },
});

const client = new ApolloClient({
  cache,
  link: new HttpLink({
    uri: url,
    headers: { Authorization: `Bearer ${token}` },
    fetch: (input, init) => {
      requests += 1;
      return fetch(input, init);
    },
  }),
});

const PAGE = gql`
  query Page($id: ID!, $after: String) {
    playlist(id: $id) {
      id
      title
      version
      entries(first: 2, after: $after) {
        version
        pageInfo { hasNextPage endCursor }
        edges { cursor node { id positionKey media { id title artists } } }
      }
    }
  }
`;

const RENAME = gql`
  mutation Rename($id: ID!, $op: ID!, $base: Int!, $title: String!) {
    updatePlaylist(input: { playlistId: $id, operationId: $op, baseVersion: $base, title: $title }) {
      version
      playlist { id title version }
      userErrors { code message }
    }
  }
`;

const first = await client.query({ query: PAGE, variables: { id: playlistId } });
const cursor = first.data.playlist.entries.pageInfo.endCursor;
// The next page, as fetchMore asks it: from the network, merged by relayStylePagination.
await client.query({
  query: PAGE,
  variables: { id: playlistId, after: cursor },
  fetchPolicy: "network-only",
});
const keys = Object.keys(cache.extract()).sort();

const renamed = await client.mutate({
  mutation: RENAME,
  variables: {
    id: playlistId,
    op: `rename-${Date.now()}`,
    base: first.data.playlist.version,
    title: "Renamed by Apollo",
  },
});
const requestsBefore = requests;
// cache-only: answered from the cache or not at all, never the network.
const after = await client.query({
  query: PAGE,
  variables: { id: playlistId },
  fetchPolicy: "cache-only",
});
const playlistRecord = cache.extract()[cache.identify({ __typename: "Playlist", id: playlistId })];

console.log(
  JSON.stringify({
    keys,
    mutationErrors: renamed.data.updatePlaylist.userErrors,
    cachedTitle: after.data.playlist.title,
    cachedVersion: after.data.playlist.version,
    mergedEdges: after.data.playlist.entries.edges.map((e) => e.node.id),
    playlistRecordTitle: playlistRecord.title,
    requestsAfterMutation: requests - requestsBefore,
    requests,
  }),
);
