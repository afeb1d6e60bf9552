"""The one admission step of every mutation, and the one outcome every payload is built from.

:func:`admit` runs before a mutation does anything: it checks the viewer,
decides the operation ids (:func:`~chorus.domain.validation.check_operation_id`,
once per command, before anything looks one up), takes the rate-limit tokens
(``CHORUS_RATE_LIMIT_PER_MINUTE``: one per command, a batch one per operation)
and, when the bucket is empty, answers a retry of what already committed from
the store. A retry that replays is free: answered even past the budget, and
its token is given back when it was taken (:meth:`Admission.settle`).

Follows and ``setPresence`` carry no operation id: they take a token and
replay nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from chorus.db.store import Committed
from chorus.domain.commands import CreatePlaylist, PlaylistCommand
from chorus.domain.errors import DomainError, OperationIdReused, RateLimited
from chorus.domain.validation import check_operation_id
from chorus.resolvers.context import RequestContext
from chorus.resolvers.ratelimit import RateLimiter

V = TypeVar("V")

Command = CreatePlaylist | PlaylistCommand
Answer = Committed | DomainError
"""What one command came to: its commit (maybe ``replayed``) or its domain error."""


@dataclass(frozen=True, slots=True)
class MutationOutcome(Generic[V]):
    """What a mutation did, for its payload: the feature's value and the error, if any.

    Attributes:
        value: the feature's answer — a :class:`Committed` (``None`` on an
            error) for a playlist command, a batch's answers, a follow's or a
            presence declaration's state.
        error: the domain error that refused it (its ``userErrors``); ``None``: it ran.
        operation_id: the command's operation id (``None``: a mutation without one).
        playlist_id: the playlist its payload shows, if any.
    """

    value: V
    error: DomainError | None = None
    operation_id: str | None = None
    playlist_id: str | None = None

    @property
    def errors(self) -> tuple[DomainError, ...]:
        """The refusal as a tuple: empty when the mutation ran."""
        return () if self.error is None else (self.error,)


@dataclass(slots=True)
class Admission:
    """What :func:`admit` decided.

    Attributes:
        actor: the viewer.
        answer: the mutation's answer given at the door (a refusal, or a
            stored commit replayed); ``None``: run it.
        charged: the tokens taken (0 when none was taken; an unlimited
            limiter takes them and gives nothing back).
        committed: operations of a batch found committed before it ran (not charged).
    """

    ctx: RequestContext
    actor: str
    answer: Answer | None = None
    charged: int = 0
    committed: int = 0

    def refund(self, tokens: int | None = None) -> None:
        """Give back ``tokens`` of those taken (all of them when ``None``)."""
        give = self.charged if tokens is None else min(tokens, self.charged)
        if give > 0:
            self.ctx.services.rate_limiter.refund(self.actor, give)
            self.charged -= give

    def settle(self, answers: Sequence[Answer]) -> None:
        """Give back the tokens of answers that cost nothing: replays (and reused ids).

        A replay found under the lock is the race of a retry with its own
        first attempt: both took a token, the first committed, the retry
        waited for it and replays. A batch's operations whose ids had a record
        before it ran (replays and reused ids alike) were not charged
        (:attr:`committed`); the rest of its replays and reused ids are given back
        here, as a single edit's are.
        """
        free = sum(
            1
            for a in answers
            if (isinstance(a, Committed) and a.replayed) or isinstance(a, OperationIdReused)
        )
        self.refund(free - self.committed)


def _rate_limited(
    limiter: RateLimiter, wait: int, *, counted: str = "", same: str = ""
) -> RateLimited:
    return RateLimited(
        f"more than {limiter.per_minute} mutations a minute{counted}; "
        f"retry in about {wait} ms{same}",
        retry_after_ms=wait,
    )


async def admit(
    ctx: RequestContext, commands: Sequence[Command] = (), *, batch: bool = False
) -> Admission:
    """Admit a mutation of ``commands`` as the viewer.

    Args:
        commands: one command (an edit, a create, a like), a batch's
            operations (``batch=True``), or none (a follow, ``setPresence``).
        batch: a batch's malformed operation id is its operation's own error
            (the store answers it), not the batch's; a retry replays the
            operations that committed and applies the rest.

    Returns:
        The admission: ``answer`` set when the mutation is answered without
        running — ``INVALID_INPUT`` (a malformed operation id; its token stays
        taken), the stored commit of a retry (``replayed``), ``OPERATION_ID_REUSED``,
        or ``RATE_LIMITED`` with ``retry_after_ms`` (nothing committed).

    Raises:
        Unauthenticated: no valid token.
    """
    actor = ctx.viewer()
    limiter = ctx.services.rate_limiter
    cost = len(commands) if batch else 1
    allowed = limiter.allow(actor, cost)
    admission = Admission(ctx, actor, charged=cost if allowed else 0)
    malformed = [_malformed(ctx, c) for c in commands]
    if not batch and commands and malformed[0] is not None:
        admission.answer = malformed[0]
    elif allowed:
        pass
    elif not commands:
        # A follow or setPresence has no operation id: there is nothing to replay.
        admission.answer = _rate_limited(limiter, limiter.retry_after_ms(actor))
    elif not batch:
        try:
            admission.answer = await ctx.services.store.replay(commands[0], actor)
        except DomainError as error:  # the operation id committed another input
            admission.answer = error
        if admission.answer is None:
            wait = limiter.retry_after_ms(actor)
            admission.answer = _rate_limited(limiter, wait, same=" with the same operationId")
    else:
        # A retry of what already committed costs nothing (as a single edit's
        # retry): charge only the operations not committed yet.
        well_formed = [c for c, bad in zip(commands, malformed, strict=True) if bad is None]
        admission.committed = await _committed(ctx, well_formed, actor)
        cost -= admission.committed
        if cost > 0 and not limiter.allow(actor, cost):
            admission.answer = _rate_limited(
                limiter,
                limiter.retry_after_ms(actor, cost),
                counted=f" (a batch counts each of its {cost} operations not yet committed)",
                same=" with the same operationIds",
            )
        else:
            admission.charged = max(cost, 0)
    return admission


def _malformed(ctx: RequestContext, command: Command) -> DomainError | None:
    """The error of ``command``'s operation id, or ``None``: the one place it is decided."""
    try:
        check_operation_id(command.operation_id, ctx.services.limits)
    except DomainError as error:
        return error
    return None


async def _committed(ctx: RequestContext, commands: Sequence[Command], actor: str) -> int:
    """How many of ``commands`` will commit nothing new: their operation id has a record
    already (one indexed read each).

    Either the record is this very command's (a retry: replayed), or it is not as the
    raw command reads, and the store decides: an operation of an atomic batch (kept
    under the batch's hash, and its later ids beside it), an operation naming a
    temporary id (kept under its resolved command's hash), both replayed by the batch
    that sent them; or an id reused for another request (``OPERATION_ID_REUSED``). None
    of them commits, so none is charged: a client can always learn whether its batch
    committed.
    """
    found = 0
    for command in commands:
        try:
            found += await ctx.services.store.replay(command, actor) is not None
        except DomainError:  # recorded, under another hash: the store answers it
            found += 1
    return found
