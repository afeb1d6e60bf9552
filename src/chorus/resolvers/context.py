"""What every resolver gets: the services of the process and the request's own parts.

:class:`Services` is built once by the composition root (``chorus.app``);
:class:`RequestContext` once per request (and per subscription event), with a
fresh :class:`~chorus.resolvers.read_source.ReadSource` so nothing read is
cached across requests.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime

from chorus.resolvers.read_source import ReadBudget, ReadSource
from chorus.resolvers.request_errors import Unauthenticated, no_viewer
from chorus.resolvers.services import Services


@dataclass(slots=True)
class RequestIdentity:
    """Who asks: the verified token's user, or why there is none.

    ``auth_error`` is set when a token was sent but is not valid; then every
    field that needs a viewer fails with ``UNAUTHENTICATED`` and that reason.
    """

    viewer_id: str | None = None
    auth_error: str | None = None
    auth_unavailable: bool = False
    """The token could not be checked (the identity provider's keys cannot be fetched):
    :meth:`viewer` raises ``SERVICE_UNAVAILABLE``, not ``UNAUTHENTICATED``."""
    expires_at: datetime | None = None
    """When the WebSocket's token expires; later operations are refused."""

    def viewer(self) -> str:
        """The authenticated user id.

        Raises:
            Unauthenticated: no token, or an invalid one.
            ServiceUnavailable: the identity provider's keys cannot be fetched.
        """
        if self.viewer_id is None:
            raise no_viewer(self.auth_error, unavailable=self.auth_unavailable)
        if self.expires_at is not None and datetime.now(UTC) >= self.expires_at:
            raise Unauthenticated("the token has expired")
        return self.viewer_id


@dataclass(slots=True)
class Operation:
    """The operation being executed (set by the schema's extensions once execution began)."""

    type: str | None = None
    """``query``, ``mutation`` or ``subscription``."""
    name: str | None = None
    """The executed operation's name (sent, or the document's only one)."""
    served_by: str | None = None
    """How a query was executed: ``plan``, ``abandoned`` (its plan gave way to
    graphql-core) or ``unplanned``; ``None``: plans are off, or not a query
    (:mod:`chorus.graphql.execution.planned`)."""
    introspection_only: bool = False
    """Every root field of the operation is ``__schema``, ``__type`` or ``__typename``
    (set by :mod:`chorus.graphql.guards.cost` when execution starts): its answer is the schema's."""


class RequestContext:
    """The context of one GraphQL request (or of one WebSocket, for all its operations).

    Attributes:
        services: the process's long-lived parts.
        identity: who asks (:class:`RequestIdentity`).
        operation: what is being executed (:class:`Operation`).
        reads: where reads come from and what was read (:class:`ReadSource`).
        connection_params: the ``connection_init`` payload of a WebSocket
            (strawberry sets it by this name); ``None`` on HTTP.
    """

    def __init__(
        self, services: Services, viewer_id: str | None = None, auth_error: str | None = None
    ) -> None:
        self.services = services
        self.identity = RequestIdentity(viewer_id, auth_error)
        self.operation = Operation()
        self.connection_params: dict[str, object] | None = None
        self.reads = ReadSource(services, viewer_id)

    def begin_operation(self) -> None:
        """A new operation on this context: its budgets of history start again, and on a
        WebSocket (one context for every operation of the socket) its reads too.

        Without it, a query on a socket was answered from what an earlier query on
        the same socket had loaded (a playlist's header as it was then), and the
        history a socket read added up over its life until every ``changes`` failed.
        """
        self.reads.budget.begin_operation()
        if self.connection_params is not None:
            self.renew_reads()

    def renew_reads(self) -> None:
        """A fresh :class:`ReadSource`: nothing read survives into the next event."""
        self.reads = self.reads.renewed(self.identity.viewer_id)

    def fork(self) -> RequestContext:
        """A copy that reads on its own: fresh reads and rewinds, the rest as this one's.

        (One rendering of a subscription event for a group of subscribers.)
        """
        fresh = copy.copy(self)
        fresh.identity = dataclasses.replace(self.identity)
        fresh.operation = dataclasses.replace(self.operation)
        budget = dataclasses.replace(self.reads.budget, rewinds={}, rewound_entries=0)
        fresh.reads = ReadSource(self.services, self.identity.viewer_id, budget)
        return fresh

    def viewer(self) -> str:
        """The authenticated user id (:meth:`RequestIdentity.viewer`)."""
        return self.identity.viewer()


__all__ = ["Operation", "ReadBudget", "ReadSource", "RequestContext", "RequestIdentity", "Services"]
