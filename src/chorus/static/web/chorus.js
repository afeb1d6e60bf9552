// The sync logic of Chorus's reference web client, without the DOM: copy this
// file into your app. It keeps one playlist in step with the server:
//
// * `confirmed`: the entries as of `version`, the last version applied, in
//   the server's order: (positionKey, id), compared bytewise.
// * `pending`: local edits sent but not yet seen in the event stream. The
//   view is `confirmed` with every pending edit laid over it, again after
//   each confirmed version: a pending edit is rebased onto what others did
//   (its anchor gone → it lands where the server will put it: the end).
// * Every edit has an `operationId` (a retry of the same edit never applies
//   twice) and the `baseVersion` it was made at (the server rebases it).
// * `playlistEvents` from the last applied version: versions arrive in order,
//   each once; a version already applied is ignored; a gap or
//   `ResyncRequired` reads the playlist again; a closed socket reconnects
//   (backoff) and subscribes again from the last applied version.
//
// * presence: `playlistPresence` tells who else has the playlist open (members
//   listed, others counted); while you edit, `setPresence(EDITING)` is
//   repeated every 10 s, and dropped 30 s after your last edit.
//
//   const session = new PlaylistSession({ url, token, playlistId, onChange });
//   await session.open();   session.add(["chinook:track:1"]);   session.close();

const ENTRY = "id positionKey mediaId media { title artists }";
const PAGE = `query Page($id: ID!, $after: String) {
  playlist(id: $id) {
    id title version viewerRole
    entries(first: 100, after: $after) {
      version totalCount pageInfo { hasNextPage endCursor }
      edges { node { ${ENTRY} } }
    }
  }
}`;
const EVENTS = `subscription Events($id: ID!, $since: Int!) {
  playlistEvents(playlistId: $id, sinceVersion: $since) {
    __typename
    ... on PlaylistChanged {
      version operationId
      changes {
        __typename
        ... on EntriesAdded { entries { ${ENTRY} } }
        ... on EntriesMoved { entries { ${ENTRY} } }
        ... on EntriesRemoved { entryIds }
        ... on DetailsUpdated { title }
        ... on PlaylistDeleted { deletedAt }
      }
    }
    ... on ResyncRequired { currentVersion reason }
  }
}`;
const PRESENCE_ENTRY = "user { id } state since";
const PRESENCE = `subscription Presence($id: ID!) {
  playlistPresence(playlistId: $id) {
    __typename
    ... on PlaylistPresence { othersCount entries { ${PRESENCE_ENTRY} } }
    ... on PresenceChanged { othersCount entries { ${PRESENCE_ENTRY} } left { id } }
  }
}`;
const SET_PRESENCE = `mutation SetPresence($i: SetPresenceInput!) {
  setPresence(input: $i) { state expiresInSeconds userErrors { code message } }
}`;
const EDITING_REPEAT_MS = 10000; // a third of the server's default CHORUS_PRESENCE_TTL_S
const EDITING_IDLE_MS = 30000; // no edit for this long: back to VIEWING
const PAYLOAD = "version replayed rebased userErrors { code message currentVersion retryAfterMs }";
const MUTATIONS = {
  add: `mutation Add($i: AddEntriesInput!) { addEntries(input: $i) { ${PAYLOAD} } }`,
  move: `mutation Move($i: MoveEntriesInput!) { moveEntries(input: $i) { ${PAYLOAD} } }`,
  remove: `mutation Remove($i: RemoveEntriesInput!) { removeEntries(input: $i) { ${PAYLOAD} } }`,
};
const FIELD = { add: "addEntries", move: "moveEntries", remove: "removeEntries" };

/** Bytewise order of (positionKey, id): the server's order of entries. */
export function compareEntries(a, b) {
  if (a.positionKey !== b.positionKey) return a.positionKey < b.positionKey ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

export class PlaylistSession {
  /**
   * @param {object} o
   * @param {string} o.url  the GraphQL endpoint, e.g. "http://127.0.0.1:8000/graphql"
   * @param {string} o.token  a bearer token
   * @param {string} o.playlistId  the playlist's global id
   * @param {(session: PlaylistSession) => void} [o.onChange]  called after every change of state
   * @param {(message: string) => void} [o.onError]  a refused edit or a failed read
   */
  constructor({ url, token, playlistId, onChange = () => {}, onError = () => {} }) {
    Object.assign(this, { url, token, playlistId, onChange, onError });
    this.title = "";
    this.version = 0;
    this.viewerRole = null;
    this.entries = new Map(); // id → entry, as of `version`
    this.pending = []; // { operationId, kind, input, committedAt: version | null }
    this.status = "idle"; // idle | loading | live | reconnecting | offline | deleted | error
    this.deleted = false;
    this.closed = false;
    this.retry = 0;
    this.unsubscribe = null;
    this.socket = null;
    this.presence = new Map(); // user id → { state, since }
    this.othersCount = 0;
    this.unwatch = null;
    this.lastEdit = 0;
    this.editing = null; // the interval repeating setPresence(EDITING)
  }

  // --- reads -------------------------------------------------------------

  async request(query, variables) {
    const response = await fetch(this.url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/graphql-response+json, application/json",
        authorization: `Bearer ${this.token}`,
      },
      body: JSON.stringify({ query, variables }),
    });
    const body = await response.json();
    if (body.errors?.length) throw new Error(body.errors.map((e) => e.message).join("; "));
    return body.data;
  }

  /** Reads every page, then follows the events from the oldest page's version. */
  async open() {
    this.setStatus("loading");
    const entries = new Map();
    let after = null;
    let oldest = null;
    let head = null;
    do {
      const { playlist } = await this.request(PAGE, { id: this.playlistId, after });
      if (!playlist) throw new Error("no such playlist, or you may not read it");
      head = playlist;
      const page = playlist.entries;
      // Pages may be read at different versions while others edit: replaying
      // the log from the oldest one makes them agree (each change carries the
      // whole entry, so applying it again is harmless).
      oldest = oldest === null ? page.version : Math.min(oldest, page.version);
      for (const { node } of page.edges) entries.set(node.id, node);
      after = page.pageInfo.hasNextPage ? page.pageInfo.endCursor : null;
    } while (after);
    this.title = head.title;
    this.viewerRole = head.viewerRole;
    this.entries = entries;
    this.version = oldest;
    this.subscribe();
    this.watchPresence();
    this.onChange(this);
  }

  /** The confirmed entries in the server's order. */
  confirmedList() {
    return [...this.entries.values()].sort(compareEntries);
  }

  /**
   * What the user sees: the confirmed list with each pending edit laid over
   * it in the order they were made. Items of a pending add have `pending: true`.
   */
  view() {
    const list = this.confirmedList().map((e) => ({ ...e, pending: false }));
    for (const edit of this.pending) {
      const { input, kind } = edit;
      if (kind === "remove") {
        const gone = new Set(input.entryIds);
        list.splice(0, list.length, ...list.filter((e) => !gone.has(e.id)));
        continue;
      }
      let items;
      if (kind === "add") {
        items = input.mediaIds.map((mediaId, i) => ({
          id: `pending:${edit.operationId}:${i}`, mediaId, media: edit.media?.[i] ?? null, pending: true,
        }));
      } else {
        const moving = new Set(input.entryIds);
        items = input.entryIds.map((id) => list.find((e) => e.id === id)).filter(Boolean);
        list.splice(0, list.length, ...list.filter((e) => !moving.has(e.id)));
      }
      const anchor = input.after ?? input.before;
      let at = anchor ? list.findIndex((e) => e.id === anchor) : -1;
      if (at < 0) at = list.length; // no anchor, or it is gone: the end
      else if (input.after) at += 1;
      list.splice(at, 0, ...items);
    }
    return list;
  }

  // --- edits -------------------------------------------------------------

  /** Adds media (ids from `searchMedia`) after `after` (an entry id), or at the end. */
  add(mediaIds, { after = null, media = null } = {}) {
    return this.send("add", { mediaIds, ...(after ? { after } : {}) }, media);
  }

  /** Moves entries after or before an entry (`{ after }` or `{ before }`), or to the end. */
  move(entryIds, anchor = {}) {
    return this.send("move", { entryIds, ...anchor });
  }

  remove(entryIds) {
    return this.send("remove", { entryIds });
  }

  async send(kind, fields, media = null) {
    this.markEditing();
    const operationId = crypto.randomUUID();
    const input = { playlistId: this.playlistId, operationId, baseVersion: this.version, ...fields };
    const edit = { operationId, kind, input, media, committedAt: null };
    this.pending.push(edit);
    this.onChange(this);
    for (let attempt = 0; ; attempt++) {
      try {
        const data = await this.request(MUTATIONS[kind], { i: input });
        const payload = data[FIELD[kind]];
        if (payload.userErrors.length) {
          const [error] = payload.userErrors;
          if (error.code === "RATE_LIMITED" && attempt < 5) {
            await sleep(error.retryAfterMs ?? 500);
            continue; // the same operationId: a retry never applies twice
          }
          this.drop(edit);
          this.onError(`${kind} refused: ${error.code}: ${error.message}`);
          return payload;
        }
        edit.committedAt = payload.version;
        this.settle();
        return payload;
      } catch (error) {
        if (attempt < 5) {
          await sleep(250 * 2 ** attempt); // the network failed: send it again, same operationId
          continue;
        }
        this.drop(edit);
        this.onError(`${kind} failed: ${error.message}`);
        throw error;
      }
    }
  }

  drop(edit) {
    this.pending = this.pending.filter((e) => e !== edit);
    this.onChange(this);
  }

  /** Forgets the pending edits whose version is applied: they are in `entries` now. */
  settle() {
    this.pending = this.pending.filter((e) => e.committedAt === null || e.committedAt > this.version);
    this.onChange(this);
  }

  // --- presence ----------------------------------------------------------

  watchPresence() {
    if (this.closed || this.unwatch) return;
    this.unwatch = this.socket.subscribe(
      { query: PRESENCE, variables: { id: this.playlistId } },
      {
        next: ({ data }) => {
          const event = data?.playlistPresence;
          if (!event) return;
          if (event.__typename === "PlaylistPresence") this.presence.clear();
          for (const { user, state, since } of event.entries) this.presence.set(user.id, { state, since });
          for (const { id } of event.left ?? []) this.presence.delete(id);
          this.othersCount = event.othersCount;
          this.onChange(this);
        },
        error: () => this.rewatch(),
        complete: () => this.rewatch(),
      },
    );
  }

  rewatch() {
    this.unwatch = null;
    if (!this.closed) setTimeout(() => this.watchPresence(), 1000);
  }

  /** Says EDITING now and every 10 s while edits go on; VIEWING again 30 s after the last. */
  markEditing() {
    this.lastEdit = Date.now();
    if (this.editing) return;
    const say = (state) =>
      this.request(SET_PRESENCE, { i: { playlistId: this.playlistId, state } }).catch(() => {});
    say("EDITING");
    this.editing = setInterval(() => {
      if (Date.now() - this.lastEdit < EDITING_IDLE_MS) return say("EDITING");
      clearInterval(this.editing);
      this.editing = null;
      say(null);
    }, EDITING_REPEAT_MS);
  }

  // --- events ------------------------------------------------------------

  subscribe() {
    if (this.closed) return;
    this.socket ??= graphqlWs.createClient({
      url: this.url.replace(/^http/, "ws"),
      connectionParams: () => ({ Authorization: `Bearer ${this.token}` }),
      retryAttempts: 0, // reconnecting is ours: from the last applied version, not the first
      lazy: true,
      on: { connected: () => { this.retry = 0; this.setStatus("live"); } },
    });
    this.unsubscribe = this.socket.subscribe(
      { query: EVENTS, variables: { id: this.playlistId, since: this.version } },
      {
        next: ({ data, errors }) => {
          if (errors?.length) return this.onError(errors.map((e) => e.message).join("; "));
          this.apply(data.playlistEvents);
        },
        error: (error) => this.lost(error),
        complete: () => this.lost(null),
      },
    );
  }

  apply(event) {
    if (event.__typename === "ResyncRequired") return this.resync();
    if (event.version <= this.version) return; // already applied (a replay after a reconnect)
    if (event.version !== this.version + 1) return this.resync(); // a gap: read again
    for (const change of event.changes) {
      switch (change.__typename) {
        case "EntriesAdded":
        case "EntriesMoved":
          for (const entry of change.entries) this.entries.set(entry.id, { ...this.entries.get(entry.id), ...entry });
          break;
        case "EntriesRemoved":
          for (const id of change.entryIds) this.entries.delete(id);
          break;
        case "DetailsUpdated":
          this.title = change.title;
          break;
        case "PlaylistDeleted":
          this.deleted = true;
          this.setStatus("deleted");
          break;
        default: // MembersChanged and what later versions of the API add
      }
    }
    this.version = event.version;
    // The event may come before the mutation's own answer: its operationId says whose it is.
    this.pending = this.pending.filter((e) => e.operationId !== event.operationId);
    this.settle();
  }

  async resync() {
    this.unsubscribe?.();
    this.unsubscribe = null;
    try {
      await this.open();
      this.settle();
    } catch (error) {
      this.onError(`resync failed: ${error.message}`);
      this.lost(error);
    }
  }

  lost(error) {
    if (this.closed || this.deleted) return;
    const code = error?.code ?? error?.[0]?.extensions?.code;
    const forbidden = Array.isArray(error) && error.some((e) => e.extensions?.code === "FORBIDDEN");
    if (forbidden) {
      this.setStatus("error");
      this.onError("access to this playlist was lost");
      return;
    }
    this.unsubscribe = null;
    this.setStatus(code === undefined ? "reconnecting" : "offline");
    const delay = Math.min(10000, 250 * 2 ** this.retry++) * (0.5 + Math.random() / 2);
    setTimeout(() => this.subscribe(), delay);
  }

  setStatus(status) {
    this.status = status;
    this.onChange(this);
  }

  close() {
    this.closed = true;
    clearInterval(this.editing);
    this.unwatch?.();
    this.unsubscribe?.();
    this.socket?.dispose();
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
