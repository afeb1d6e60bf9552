"""CPU time of server processes, read from ``/proc``, for the benches' CPU per request.

A server's CPU time is the user and system time (``/proc/PID/stat`` fields
14 to 17, ``utime``, ``stime``, ``cutime``, ``cstime``: its own and that of
its children that ended, in clock ticks of ``SC_CLK_TCK``, 10 ms on Linux)
of its process and of every live descendant (``chorus serve --workers N``
forks; PostgreSQL's backends come and go with connections). Children are found
by scanning every ``/proc/*/stat`` for its parent id, as ``/proc/PID/task/*/
children`` needs a kernel option not every machine has. A bench reads the
total before and after a measured slice; the difference over the requests
served in it is the CPU milliseconds per request.

The figure is the server's own work (parse, execute, serialise, its driver's
side of the database protocol); PostgreSQL's work for the same requests is
in its own processes, read with :func:`postmaster_pid` as the root.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """``(parent pid, CPU seconds of it and its reaped children)``; ``None`` once it has gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    # Field 2 (the command) is in parentheses and may hold spaces: split after it.
    fields = text[text.rindex(b")") + 2 :].split()
    # utime, stime, and cutime, cstime: the time of its children that ended and were
    # waited for (PostgreSQL's backends end with their connections).
    return int(fields[1]), sum(int(x) for x in fields[11:15]) * TICK_S


def cpu_seconds(roots: Iterable[int]) -> float:
    """User + system CPU seconds of the processes ``roots`` and all their live descendants.

    Raises:
        RuntimeError: no process of ``roots`` is running (a server died).
    """
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (found := _stat(int(name))) is not None:
            stats[int(name)] = found
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    wanted = [pid for pid in roots if pid in stats]
    if not wanted:
        raise RuntimeError(f"none of the processes {list(roots)} is running")
    seen: set[int] = set()
    while wanted:
        pid = wanted.pop()
        if pid not in seen:
            seen.add(pid)
            wanted.extend(children.get(pid, ()))
    return sum(stats[pid][1] for pid in seen)


class CpuMeters:
    """The CPU seconds a server's processes and PostgreSQL's spent since it was made
    (:func:`cpu_seconds` of each; an empty list of roots is not measured)."""

    def __init__(self, pids: Sequence[int], db_pids: Sequence[int] = ()) -> None:
        self.roots = (pids, db_pids)
        self.start = [cpu_seconds(p) if p else None for p in self.roots]

    def spent(self) -> tuple[float | None, float | None]:
        """``(server, PostgreSQL)`` CPU seconds so far; ``None`` for one not measured."""
        server, db = (
            None if s is None else cpu_seconds(p) - s
            for p, s in zip(self.roots, self.start, strict=True)
        )
        return server, db


def _parent_of_postgres(backend: int) -> int | None:
    """The parent of PostgreSQL backend ``backend``, read while it lives; ``None`` when the
    number is not a PostgreSQL process here (another host or namespace)."""
    try:
        with open(f"/proc/{backend}/comm") as f:
            if not f.read().startswith("postgres"):
                return None
    except OSError:
        return None
    found = _stat(backend)
    return None if found is None else found[0]


async def postmaster_pid(dsn: str) -> int | None:
    """The PostgreSQL server process at ``dsn`` (the parent of a backend of ours); ``None``
    when it is not visible here (PostgreSQL on another host or in another namespace)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return _parent_of_postgres(await conn.fetchval("SELECT pg_backend_pid()"))
    finally:
        await conn.close()
