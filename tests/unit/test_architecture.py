"""The dependency direction of STYLE.md, checked on the source itself."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import chorus

SRC = Path(chorus.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_domain_imports_only_the_standard_library_and_itself() -> None:
    offenders = {
        f"{path.relative_to(SRC)}: {name}"
        for path in (SRC / "domain").rglob("*.py")
        for name in _imports(path)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not (name == "chorus.domain" or name.startswith("chorus.domain."))
    }
    assert not offenders


def test_nothing_connects_at_import_time() -> None:
    # Engines and clients are built in the composition root, never at module level.
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
                func = node.value.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                assert name not in {"create_async_engine", "create_engine", "Redis", "from_url"}, (
                    f"{path.relative_to(SRC)} connects at import time"
                )


# Every long-lived part is built by the composition root and nowhere else, so
# each command gets the same wiring (docs/architecture.md). The root is
# bootstrap.py and its event path, wiring.py (which bootstrap enters).
COMPOSITION_ROOT = {"bootstrap.py", "wiring.py"}
BUILT_BY_THE_ROOT = {
    "Database",
    "PlaylistStore",
    "EmbeddedCatalog",
    "HttpCatalog",
    "OutboxRelay",
    "KafkaPublisher",
    "Fanout",
    "CacheProjector",
    "SnapshotCache",
    "CircuitBreaker",
    "RedisBus",
    "InProcessBus",
    "Hub",
    "RateLimiter",
    "Presence",
    "LocalPresenceStore",
    "RedisPresenceStore",
    "TracerProvider",
    "OTLPSpanExporter",
    "BatchSpanProcessor",
}


def _calls(path: Path) -> set[str]:
    called: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            called.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return called


def test_services_and_workers_are_built_only_in_the_composition_root() -> None:
    offenders = {
        f"{path.relative_to(SRC)} builds {name}"
        for path in SRC.rglob("*.py")
        if str(path.relative_to(SRC)) not in COMPOSITION_ROOT
        for name in _calls(path) & BUILT_BY_THE_ROOT
    }
    assert not offenders


def test_every_package_and_top_level_module_is_placed_in_the_architecture_page() -> None:
    page = (SRC.parents[1] / "docs" / "architecture.md").read_text()
    parts = {
        p.name + "/" if p.is_dir() else p.name
        for p in SRC.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py")
    } - {"__init__.py"}
    missing = sorted(part for part in parts if f"`{part}`" not in page)
    assert not missing, f"docs/architecture.md does not place {missing}"
