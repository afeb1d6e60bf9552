"""The admission step of every mutation (:mod:`chorus.resolvers.admission`), on both databases.

The viewer, the operation id, the rate limit, the replay of a committed
retry and the refunds, asked of :func:`admit` itself. The limiter's clock is
frozen, so no token comes back with time during a test.
"""

from __future__ import annotations

import pytest

from chorus.db.engine import Database
from chorus.db.store import Committed, PlaylistStore
from chorus.domain.commands import AddEntries, CreatePlaylist
from chorus.domain.errors import (
    ErrorCode,
    InvalidInput,
    NotFound,
    OperationIdReused,
    RateLimited,
)
from chorus.domain.limits import DEFAULT_LIMITS
from chorus.resolvers.admission import admit
from chorus.resolvers.context import RequestContext, Services
from chorus.resolvers.ratelimit import RateLimiter
from chorus.resolvers.request_errors import Unauthenticated
from tests.integration.test_graphql_execute import CountingCatalog


def _context(database: Database, store: PlaylistStore, per_minute: int) -> RequestContext:
    limiter = RateLimiter(per_minute, clock=lambda: 0.0)
    services = Services(database, store, CountingCatalog(), DEFAULT_LIMITS, rate_limiter=limiter)
    return RequestContext(services, "alice")


def _tokens(ctx: RequestContext) -> float:
    assert ctx.services.rate_limiter.limited
    return ctx.services.rate_limiter.available("alice")


async def _spend(ctx: RequestContext, tokens: int) -> None:
    for _ in range(tokens):
        assert (await admit(ctx)).answer is None


async def test_no_viewer_is_unauthenticated_and_takes_no_token(
    database: Database, store: PlaylistStore
) -> None:
    ctx = _context(database, store, 2)
    anonymous = RequestContext(ctx.services, None)
    with pytest.raises(Unauthenticated) as refused:
        await admit(anonymous, (CreatePlaylist("op", "Mix"),))
    assert refused.value.code == "UNAUTHENTICATED"
    assert _tokens(anonymous) == 2


@pytest.mark.parametrize("with_operation_id", [True, False], ids=["command", "follow"])
async def test_an_empty_bucket_is_rate_limited_with_a_retry_after(
    database: Database, store: PlaylistStore, with_operation_id: bool
) -> None:
    ctx = _context(database, store, 2)
    await _spend(ctx, 2)
    commands = (CreatePlaylist("never-committed", "Mix"),) if with_operation_id else ()
    admission = await admit(ctx, commands)
    assert isinstance(admission.answer, RateLimited)
    assert admission.answer.code is ErrorCode.RATE_LIMITED
    assert admission.answer.retry_after_ms == 30_000  # one token at two a minute
    assert ("same operationId" in admission.answer.message) is with_operation_id
    assert admission.charged == 0


async def test_a_committed_retry_is_replayed_past_the_budget_without_a_token(
    database: Database, store: PlaylistStore
) -> None:
    ctx = _context(database, store, 2)
    first = await store.create(CreatePlaylist("create", "Mix"), "alice")
    await _spend(ctx, 2)
    admission = await admit(ctx, (CreatePlaylist("create", "Mix"),))
    assert isinstance(admission.answer, Committed)
    assert admission.answer.replayed
    assert admission.answer.outcome == first.outcome
    assert admission.charged == 0
    assert _tokens(ctx) == 0
    reused = await admit(ctx, (CreatePlaylist("create", "Another"),))
    assert isinstance(reused.answer, OperationIdReused)


async def test_a_malformed_operation_id_is_answered_at_the_door_and_keeps_its_token(
    database: Database, store: PlaylistStore
) -> None:
    ctx = _context(database, store, 3)
    admission = await admit(ctx, (CreatePlaylist("o" * 65, "Mix"),))
    assert isinstance(admission.answer, InvalidInput)
    assert admission.answer.field == ("operationId",)
    assert _tokens(ctx) == 2
    # In a batch it is that operation's own error (the store answers it): admitted.
    batch = [AddEntries("p", "o" * 65, 0, ("m",)), AddEntries("p", "ok", 0, ("m",))]
    assert (await admit(ctx, batch, batch=True)).answer is None


async def test_refunds_give_back_what_turned_out_free(
    database: Database, store: PlaylistStore
) -> None:
    ctx = _context(database, store, 4)
    made = await store.create(CreatePlaylist("create", "Mix"), "alice")
    replayed = Committed(made.outcome, replayed=True)
    reused = OperationIdReused("create")
    admission = await admit(ctx, (CreatePlaylist("create", "Mix"),))
    assert (admission.answer, admission.charged, _tokens(ctx)) == (None, 1, 3)
    admission.settle((NotFound("gone"),))  # a refused command costs its token
    assert _tokens(ctx) == 3
    admission.settle((made,))  # so does a commit
    assert _tokens(ctx) == 3
    admission.settle((replayed,))  # a replay found under the lock is free
    assert (_tokens(ctx), admission.charged) == (4, 0)
    admission.settle((replayed,))  # never more than was taken
    assert _tokens(ctx) == 4
    again = await admit(ctx, (CreatePlaylist("create", "Other"),))
    again.settle((reused,))  # a reused operation id committed nothing
    assert _tokens(ctx) == 4

    batch = [AddEntries("p", f"op-{i}", 0, ("m",)) for i in range(3)]
    whole = await admit(ctx, batch, batch=True)
    assert (whole.charged, _tokens(ctx)) == (3, 1)
    # A replay and a reused id cost nothing, in a batch as alone (the reused id had no
    # record when admitted: it raced); the commit keeps its token.
    whole.settle((replayed, reused, made))
    assert _tokens(ctx) == 3
    whole.refund()  # a batch refused whole gives back all it took
    assert (_tokens(ctx), whole.charged) == (4, 0)
