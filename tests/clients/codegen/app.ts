// A small client's logic typed by graphql-codegen's output: `tsc --noEmit`
// fails when the schema and these uses part ways (a renamed field, a new
// member of a union, a field that became nullable).
import type {
  EntryRowFragment,
  PlaylistEventsSubscription,
  PlaylistPageQuery,
  RemoveRowsMutation,
  RenamePlaylistMutation,
  RenamePlaylistMutationVariables,
} from "./__generated__/operations";
// The schema's own types (the typescript plugin), e.g. for a cache's records.
import type { Media, PlaylistEntry } from "./__generated__/schema";

type Row = { id: string; positionKey: string; title: string };

function assertNever(value: never): never {
  throw new Error(`unexpected ${JSON.stringify(value)}`);
}

export function rows(page: PlaylistPageQuery): Row[] {
  const entries = page.playlist?.entries.edges ?? [];
  return entries.map(({ node }: { node: EntryRowFragment }) => ({
    id: node.id,
    positionKey: node.positionKey,
    // media is null when the catalog does not know it or is down.
    title: node.media?.title ?? node.mediaId,
  }));
}

export function nextCursor(page: PlaylistPageQuery): string | null {
  const info = page.playlist?.entries.pageInfo;
  return info?.hasNextPage ? (info.endCursor ?? null) : null;
}

export function rename(
  id: string,
  lastAppliedVersion: number,
  title: string,
): RenamePlaylistMutationVariables {
  // A fresh operationId per edit (reused only for a retry of the same request).
  return { id, op: crypto.randomUUID(), base: lastAppliedVersion, title };
}

export function renamed(answer: RenamePlaylistMutation): number {
  const payload = answer.updatePlaylist;
  const conflict = payload.userErrors.find((e) => e.code === "VERSION_CONFLICT");
  if (conflict) return conflict.currentVersion ?? -1;
  return payload.version ?? payload.playlist?.version ?? -1;
}

export function removedIds(answer: RemoveRowsMutation): string[] {
  return [...answer.removeEntries.removedEntryIds, ...answer.removeEntries.skippedEntryIds];
}

/** Applies one event to a list sorted by (positionKey, id); returns the version now applied. */
export function apply(list: Row[], event: PlaylistEventsSubscription, applied: number): number {
  const e = event.playlistEvents;
  switch (e.__typename) {
    case "ResyncRequired":
      list.length = 0; // read entries again from e.currentVersion
      return e.currentVersion;
    case "PlaylistChanged":
      if (e.version !== applied + 1) return applied;
      for (const change of e.changes) {
        switch (change.__typename) {
          case "EntriesAdded":
            list.push(...change.entries.map((x) => ({ ...x, title: x.mediaId })));
            break;
          case "EntriesMoved":
            for (const moved of change.entries) {
              const row = list.find((r) => r.id === moved.id);
              if (row) row.positionKey = moved.positionKey;
            }
            break;
          case "EntriesRemoved": {
            const gone = new Set(change.entryIds);
            list.splice(0, list.length, ...list.filter((r) => !gone.has(r.id)));
            break;
          }
          case "DetailsUpdated":
          case "MembersChanged":
          case "PlaylistDeleted":
            break;
          default:
            assertNever(change);
        }
      }
      list.sort((a, b) =>
        a.positionKey < b.positionKey ? -1 : a.positionKey > b.positionKey ? 1 : a.id < b.id ? -1 : 1,
      );
      return e.version;
    default:
      return assertNever(e);
  }
}


export function mediaKey(media: Pick<Media, "__typename" | "id">): string {
  return `Media:${media.id}`;
}

export function entryMedia(entry: Pick<PlaylistEntry, "media">): Media | null {
  return entry.media ?? null;
}
