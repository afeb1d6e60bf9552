"""The tables ``bench/writes.py`` prints: each contender's rate and latencies against the
raw SQL peer, and each one's CPU per request."""

from __future__ import annotations

from _wrk import Row


def over(row: Row, other: Row) -> float:
    """``row``'s req/s divided by ``other``'s (every row of this bench is measured)."""
    assert row.rps is not None
    assert other.rps is not None
    return row.rps / other.rps


def table(
    title: str,
    chorus: dict[str, dict[str, Row]],
    peers: dict[str, dict[str, Row]],
    targets: bool,
) -> None:
    """One line per workload and mode; ``ratio`` is against ``raw`` (the SQL peer), ``/bare``
    against the bare HTTP peer when it ran, ``/plain`` against one transaction per command."""
    peer, bare = peers["raw"], peers.get("bare")
    print(f"\n{title}")
    print(
        f"{'workload':16}{'Chorus req/s':>13}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'raw tx/s':>10}{'p50 ms':>8}{'p99 ms':>8}{'ratio':>7}"
        + (f"{'bare req/s':>11}{'/bare':>7}" if bare else "")
        + f"{'/plain':>8}"
    )
    goals = {"spread": 0.35, "hot": 0.75}
    for name, p in peer.items():
        for mode, figures in chorus.items():
            c = figures[name]
            ratio = over(c, p)
            plain = chorus.get("plain", {}).get(name)
            versus = f"{over(c, plain):>8.2f}" if plain and mode != "plain" else " " * 8
            ceiling = f"{bare[name].rps:>11.0f}{over(c, bare[name]):>7.2f}" if bare else ""
            verdict = ""
            if targets and mode == "group":
                # The target is of ``ratio`` (against raw SQL), not of /bare or /plain.
                met = ratio >= goals[name]
                verdict = f"  target ratio >= {goals[name]}: {'pass' if met else 'FAIL'}"
            print(
                f"{name + ' ' + mode:16}{c.rps:>13.0f}{c.p50_ms:>8.1f}{c.p99_ms:>8.1f}"
                f"{p.rps:>10.0f}{p.p50_ms:>8.1f}{p.p99_ms:>8.1f}{ratio:>7.3f}"
                f"{ceiling}{versus}{verdict}"
            )
    if bare:
        for name, b in bare.items():
            print(
                f"{name + ' bare':16}{b.rps:>13.0f}{b.p50_ms:>8.1f}{b.p99_ms:>8.1f}"
                f"{peer[name].rps:>10.0f}{'':>16}{over(b, peer[name]):>7.3f}"
                "  (the bare HTTP peer against raw SQL)"
            )


def cpu_table(chorus: dict[str, dict[str, Row]], peers: dict[str, dict[str, Row]]) -> None:
    """CPU milliseconds per request (transaction) of each contender: its server's processes
    (``chorus serve``, the bare peer's uvicorn; pgbench has none but PostgreSQL) and
    PostgreSQL's (the whole server's: other users' queries count too)."""

    def ms(value: float | None) -> str:
        return f"{value:>10.2f}" if value is not None else f"{'—':>10}"

    print("\nCPU per request, ms (server: its processes; PostgreSQL: the whole server)")
    print(f"{'workload':16}{'server':>10}{'PostgreSQL':>11}{'sum':>10}")
    names = {**{m: m for m in chorus}, "raw": "pgbench", "bare": "bare"}
    contenders = {**chorus, **peers}
    for workload in ("spread", "hot"):
        for name, figures in contenders.items():
            f = figures[workload]
            both = [x for x in (f.cpu_ms, f.db_cpu_ms) if x is not None]
            total = sum(both) if both else None
            label = f"{workload} {names.get(name, name)}"
            print(f"{label:16}{ms(f.cpu_ms)} {ms(f.db_cpu_ms)}{ms(total)}")
