"""An offline device's queue of edits and what others did meanwhile, as plain values.

Both are made from a seeded random generator, so the same scenario can be
sent as one ``applyOperations`` batch to one playlist and one mutation at a
time to a twin playlist, through the store or over HTTP, and the lists
compared. References are abstract: ``("seed", k)`` is the k-th entry the
playlist started with, ``("tmp", name)`` a temporary id of an earlier add.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

Ref = tuple[Literal["seed", "tmp"], str]
SEEDS = 20


@dataclass(frozen=True)
class Op:
    """One offline edit: ``kind`` is addEntries, moveEntries, removeEntries or updatePlaylist."""

    kind: str
    operation_id: str
    media: tuple[str, ...] = ()
    targets: tuple[Ref, ...] = ()
    after: Ref | None = None
    before: Ref | None = None
    client_ids: tuple[str, ...] = ()
    title: str | None = None


def seed_media() -> list[str]:
    return [f"m-seed-{k}" for k in range(SEEDS)]


def offline_ops(seed: int, count: int = 50, prefix: str = "offline") -> list[Op]:
    """``count`` edits made against the seeded list, anchors on seeds and on earlier adds."""
    rng = random.Random(seed)
    known: list[Ref] = [("seed", str(k)) for k in range(SEEDS)]
    ops: list[Op] = []
    for i in range(count):
        opid = f"{prefix}-{seed}-{i}"
        roll = rng.random()
        if roll < 0.4:
            n = rng.randint(1, 3)
            client_ids = tuple(f"tmp-{i}-{j}" for j in range(n))
            anchor = rng.choice(known) if rng.random() < 0.8 else None
            where = {rng.choice(["after", "before"]): anchor} if anchor else {}
            media = tuple(f"m-{prefix}-{i}-{j}" for j in range(n))
            ops.append(Op("addEntries", opid, media, client_ids=client_ids, **where))  # type: ignore[arg-type]
            known += [("tmp", c) for c in client_ids]
        elif roll < 0.75:
            targets = tuple(rng.sample(known, 2))
            anchor = rng.choice([k for k in known if k not in targets])
            ops.append(Op("moveEntries", opid, targets=targets, after=anchor))
        elif roll < 0.92:
            ops.append(Op("removeEntries", opid, targets=(rng.choice(known),)))
        else:
            ops.append(Op("updatePlaylist", opid, title=f"Offline {i}"))
    return ops


@dataclass
class Others:
    """Edits by someone else, chosen by position in the live list (the same on twins)."""

    seed: int
    rng: random.Random = field(init=False)
    step: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def next(self, live_count: int) -> tuple[str, list[int]]:
        """``(kind, positions)``: add after position p, move p1 after p2, or remove p."""
        self.step += 1
        roll = self.rng.random()
        if live_count < 10 or roll < 0.45:
            return "add", [self.rng.randrange(live_count)] if live_count else []
        if roll < 0.8:
            a, b = self.rng.sample(range(live_count), 2)
            return "move", [a, b]
        return "remove", [self.rng.randrange(live_count)]
