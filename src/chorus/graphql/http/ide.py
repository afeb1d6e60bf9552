"""GraphiQL, served by Chorus itself: the page and where its assets live.

``GET /graphql`` from a browser (``Accept: text/html``) answers :data:`PAGE`;
its scripts and styles come from ``/graphiql/`` (:data:`ASSETS_PATH`), the
files ``scripts/vendor-assets`` copied from the npm packages (GraphiQL
3.8.3, React 18.2.0; versions, integrity and licences in
``src/chorus/static/graphiql/``). Nothing is fetched from another host, so the
page works without internet; :data:`CONTENT_SECURITY_POLICY` makes the
browser refuse anything else.

Queries and mutations go over HTTP, subscriptions over ``graphql-transport-ws``
on the same URL; GraphiQL's *Headers* editor is sent with both: as HTTP
headers, and as the ``connection_init`` payload of each subscription's socket
(so ``{"Authorization": "Bearer <token>"}`` works for both). The headers are
kept in the browser's local storage for this origin.

The same app serves the reference web client at ``/web/`` (:data:`WEB_PATH`),
with the same protections (:func:`protect`): a policy of its own origin
only, and no framing by any page (``frame-ancestors 'none'``,
``X-Frame-Options: DENY``), so another site cannot lay the editing client
under its own buttons (clickjacking; issue 30).
"""

from __future__ import annotations

import json
from pathlib import Path

from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

ASSETS_URL = "/graphiql"
"""Where the app mounts :data:`ASSETS_PATH`."""

ASSETS_PATH = Path(__file__).resolve().parents[2] / "static" / "graphiql"
"""GraphiQL's and React's files, with their licences and ``VERSIONS``."""

WEB_URL = "/web"
"""Where the app serves the reference web client (``examples/web/`` in the repository)."""

WEB_PATH = ASSETS_PATH.parent / "web"
"""The reference web client: ``index.html``, ``chorus.js`` (its sync logic), ``app.js``
and ``vendor/`` (the graphql-ws browser client, with its licence)."""


def _policy(script_src: str) -> str:
    return (
        f"default-src 'self'; script-src {script_src}; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
        "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'self'"
    )


CONTENT_SECURITY_POLICY = _policy("'self' 'unsafe-inline'")
"""GraphiQL's policy: its own origin only (GraphiQL's inline styles and the
page's one inline script excepted), so a missing asset fails visibly rather
than reaching for a CDN; framed by no page."""

WEB_CONTENT_SECURITY_POLICY = _policy("'self'")
"""The web client's policy: GraphiQL's without inline scripts (it has none;
its one ``<style>`` block needs inline styles)."""


def protect(headers: MutableHeaders, policy: str) -> None:
    """Give a page's response its policy and forbid framing it.

    ``X-Frame-Options: DENY`` beside ``frame-ancestors 'none'``: browsers
    that predate the latter read the former.
    """
    headers["Content-Security-Policy"] = policy
    headers["X-Frame-Options"] = "DENY"


class ProtectedFiles(StaticFiles):
    """Static files each answered with :func:`protect`'s headers and ``policy``."""

    def __init__(self, *, directory: Path, policy: str, html: bool = False) -> None:
        super().__init__(directory=directory, html=html)
        self.policy = policy

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        protect(response.headers, self.policy)
        return response


_DEFAULT_QUERY = """\
# Chorus: collaborative playlists.
#
# 1. Mint a token:  ./scripts/chorus token alice
# 2. Headers (below): {"Authorization": "Bearer <the token>"}
# 3. Run (Ctrl-Enter). Subscriptions go over graphql-transport-ws,
#    with the same headers as the connection_init payload.

query MyPlaylists {
  viewer {
    user { id }
    playlists(first: 10) {
      totalCount
      edges { node { id title version entryCount } }
    }
  }
}
"""

PAGE = f"""<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Chorus · GraphiQL</title>
    <link rel="icon" href="data:," />
    <link rel="stylesheet" href="{ASSETS_URL}/graphiql.min.css" />
    <style>
      html, body, #graphiql {{ height: 100%; margin: 0; overflow: hidden; }}
    </style>
  </head>
  <body>
    <div id="graphiql">Loading GraphiQL…</div>
    <script src="{ASSETS_URL}/react.production.min.js"></script>
    <script src="{ASSETS_URL}/react-dom.production.min.js"></script>
    <script src="{ASSETS_URL}/graphiql.min.js"></script>
    <script>
      const url = new URL(window.location.href);
      url.search = "";
      url.hash = "";
      const socketUrl = new URL(url);
      socketUrl.protocol = url.protocol === "https:" ? "wss:" : "ws:";
      // createFetcher opens one graphql-ws client per subscription with the
      // Headers editor's JSON as its connectionParams: the token goes with it.
      const fetcher = GraphiQL.createFetcher({{
        url: url.toString(),
        subscriptionUrl: socketUrl.toString(),
      }});
      ReactDOM.createRoot(document.getElementById("graphiql")).render(
        React.createElement(GraphiQL, {{
          fetcher,
          defaultQuery: {json.dumps(_DEFAULT_QUERY)},
          defaultHeaders: '{{"Authorization": "Bearer <token>"}}',
          shouldPersistHeaders: true,
          defaultEditorToolsVisibility: "headers",
        }}),
      );
    </script>
  </body>
</html>
"""
"""The HTML ``GET /graphql`` answers a browser."""
