// Relay documents a playlist view needs, compiled by relay-compiler against
// the committed schema (npm run relay; tests/e2e/test_clients.py runs it).
// relay-compiler only reads the graphql`` literals: an app would import
// `graphql` from react-relay (babel-plugin-relay swaps each literal for its
// artifact); relay/store.mjs imports the artifacts in __generated__ itself.
// This file is never run.

// A page of entries as a Relay connection: usePaginationFragment refetches it
// through Query.node (Playlist implements Node) with `count` and `cursor`.
export const playlistFragment = graphql`
  fragment PlaylistView_playlist on Playlist
  @refetchable(queryName: "PlaylistViewPaginationQuery")
  @argumentDefinitions(count: { type: "Int", defaultValue: 50 }, cursor: { type: "String" }) {
    id
    title
    version
    entries(first: $count, after: $cursor) @connection(key: "PlaylistView_entries") {
      __id
      version
      totalCount
      edges {
        cursor
        node {
          ...PlaylistView_entry
        }
      }
    }
  }
`;

export const entryFragment = graphql`
  fragment PlaylistView_entry on PlaylistEntry {
    id
    positionKey
    mediaId
    media {
      id
      title
      artists
      durationMs
    }
  }
`;

export const query = graphql`
  query PlaylistViewQuery($id: ID!) {
    playlist(id: $id) {
      ...PlaylistView_playlist
    }
  }
`;

// The new entries are appended to the connections given (the `__id` above).
export const addMutation = graphql`
  mutation PlaylistViewAddMutation($input: AddEntriesInput!, $connections: [ID!]!) {
    addEntries(input: $input) {
      version
      replayed
      entries @appendNode(connections: $connections, edgeTypeName: "PlaylistEntryEdge") {
        id
        ...PlaylistView_entry
      }
      userErrors {
        code
        message
        currentVersion
      }
    }
  }
`;

// removedEntryIds are the entries' global IDs: @deleteRecord drops each record
// from the store, and with it its edge from every connection.
export const removeMutation = graphql`
  mutation PlaylistViewRemoveMutation($input: RemoveEntriesInput!) {
    removeEntries(input: $input) {
      version
      replayed
      removedEntryIds @deleteRecord
      skippedEntryIds
      userErrors {
        code
        message
      }
    }
  }
`;

export const renameMutation = graphql`
  mutation PlaylistViewRenameMutation($input: UpdatePlaylistInput!) {
    updatePlaylist(input: $input) {
      version
      playlist {
        id
        title
        version
      }
      userErrors {
        code
        message
      }
    }
  }
`;

export const eventsSubscription = graphql`
  subscription PlaylistViewEventsSubscription($id: ID!, $since: Int!) {
    playlistEvents(playlistId: $id, sinceVersion: $since) {
      __typename
      ... on PlaylistChanged {
        version
        changes {
          __typename
          ... on EntriesRemoved {
            entryIds
          }
        }
      }
      ... on ResyncRequired {
        currentVersion
        reason
      }
    }
  }
`;
