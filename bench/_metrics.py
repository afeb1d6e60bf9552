"""Counters read from the servers' ``/metrics`` (Prometheus text), summed over processes."""

from __future__ import annotations

import httpx


def counted(base_urls: list[str], metric: str) -> dict[str, int]:
    """``metric``'s samples by the value of their one label, summed over the servers at
    ``base_urls``, in the order ``/metrics`` lists them."""
    counts: dict[str, int] = {}
    for base_url in base_urls:
        for line in httpx.get(f"{base_url}/metrics", timeout=30).text.splitlines():
            if line.startswith(f"{metric}{{"):
                label = line.split('="', 1)[1].split('"', 1)[0]
                counts[label] = counts.get(label, 0) + int(float(line.rsplit(" ", 1)[1]))
    return counts
