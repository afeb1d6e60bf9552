"""The ``chorus`` command line.

``chorus --version`` prints the version; ``chorus db upgrade`` migrates the
configured database. Errors in settings or arguments exit with status 2 and a
one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from chorus import __version__
from chorus.settings import Settings


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"CHORUS_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise SystemExit(f"chorus: bad settings: {problems}") from None


def _db_upgrade(_args: argparse.Namespace) -> int:
    from chorus.db.migrate import upgrade

    settings = _settings()
    upgrade(settings.database_url)
    print(f"database is at the latest schema: {settings.database_url}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chorus", description="Collaborative playlists.")
    parser.add_argument("--version", action="version", version=f"chorus {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    db = commands.add_parser("db", help="database maintenance")
    db_commands = db.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    db_commands.add_parser("upgrade", help="apply migrations").set_defaults(run=_db_upgrade)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    result: int = args.run(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
