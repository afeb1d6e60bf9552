// The page of the reference client: forms, the list, buttons. The sync logic
// is chorus.js; this file only draws its state and turns clicks into edits.
import { PlaylistSession } from "./chorus.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const endpoint = new URL("/graphql", location.href).toString();
// The token may come in the fragment (#token=…): a fragment is never sent to
// the server, so it is in no access log; it is dropped from the address bar.
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.has("token")) history.replaceState(null, "", location.pathname + location.search);
$("token").value = fragment.get("token") ?? sessionStorage.getItem("chorus-token") ?? "";
$("playlist").value = params.get("playlist") ?? "";

let session = null;
window.chorusSession = () => session; // for the browser tests and the console

function text(tag, content, attrs = {}) {
  const el = document.createElement(tag);
  el.textContent = content;
  Object.assign(el, attrs);
  return el;
}

function error(message) {
  $("errors").textContent = message;
}

function render(s) {
  $("title").textContent = s.title || "(untitled)";
  $("version").textContent = String(s.version);
  $("status").textContent = s.status;
  $("status").dataset.state = s.status;
  $("pending").textContent = s.pending.length ? `${s.pending.length} pending` : "";
  document.body.dataset.version = String(s.version);
  document.body.dataset.pending = String(s.pending.length);
  const here = [...s.presence].map(([user, { state }]) =>
    text("span", `${user}${state === "EDITING" ? " (editing)" : ""}`, { title: state }));
  if (s.othersCount) here.push(text("span", `+${s.othersCount} others`));
  $("presence").replaceChildren(...(here.length ? [text("span", "Here:"), ...here] : []));
  const list = s.view();
  const editable = s.viewerRole === "OWNER" || s.viewerRole === "EDITOR";
  $("entries").replaceChildren(
    ...list.map((entry, i) => {
      const li = text("li", entry.media ? `${entry.media.title} — ${entry.media.artists.join(", ")}` : entry.mediaId);
      li.dataset.id = entry.id;
      li.dataset.mediaId = entry.mediaId;
      if (entry.pending) li.className = "pending";
      if (editable && !entry.pending) {
        const up = text("button", "↑", { title: "move up", disabled: i === 0 });
        up.onclick = () => session.move([entry.id], { before: list[i - 1].id });
        const down = text("button", "↓", { title: "move down", disabled: i === list.length - 1 });
        down.onclick = () => session.move([entry.id], { after: list[i + 1].id });
        const remove = text("button", "✕", { title: "remove" });
        remove.onclick = () => session.remove([entry.id]);
        li.append(up, down, remove);
      }
      return li;
    }),
  );
}

$("connect").onsubmit = async (event) => {
  event.preventDefault();
  session?.close();
  error("");
  const token = $("token").value.trim();
  sessionStorage.setItem("chorus-token", token);
  session = new PlaylistSession({
    url: endpoint,
    token,
    playlistId: $("playlist").value.trim(),
    onChange: render,
    onError: error,
  });
  try {
    await session.open();
  } catch (e) {
    error(e.message);
  }
};

$("search").onsubmit = async (event) => {
  event.preventDefault();
  if (!session) return error("open a playlist first");
  const query = `query Search($q: String!) { searchMedia(query: $q, first: 10) {
    edges { node { id title artists } } } }`;
  try {
    const data = await session.request(query, { q: $("query").value });
    $("results").replaceChildren(
      ...data.searchMedia.edges.map(({ node }) => {
        const li = text("li", `${node.title} — ${node.artists.join(", ")} `);
        const add = text("button", "add");
        add.onclick = () => session.add([node.id], { media: [node] });
        li.append(add);
        return li;
      }),
    );
  } catch (e) {
    error(e.message);
  }
};

if ($("token").value && $("playlist").value) $("connect").requestSubmit();
