"""Multiplexed delivery: a subscription event executed once per group, its frame written per socket.

Strawberry runs a subscription as graphql-core does: each item the
resolver yields is executed again for each subscriber (its own DataLoaders,
its own media lookup, its own JSON encoding). Chorus goes around that in
two places, neither a fork of strawberry:

* :class:`DeliveryExecutor` is the schema's graphql-core executor. An item
  that ``playlistEvents`` yields as a :class:`SharedEvent` is executed
  through the hub's :class:`~chorus.subscriptions.delivery_groups.RenderMemo`: the
  first subscriber of a group (same playlist, document, variables, operation
  name) to reach a version executes it, in a fresh request context, and
  encodes its ``next`` payload once; the others of the group get that
  result. Whether it may be shared is what the response cache decides
  (:class:`~chorus.resolvers.reads.ReadSet.shared`): a field that depends on
  the viewer (``viewerRole``, ``viewerHasLiked``) keeps the rendering to that
  viewer. A result with errors is never shared.
* :func:`next_frame` splices a socket's operation id into the encoded
  payload; :class:`~chorus.graphql.websocket.handler.TransportWSHandler` writes it.

Everything else stays each subscriber's: its stream
(:mod:`chorus.subscriptions.stream`) decides which versions it gets, so
ordering, catch-up, gap repair, resync and the access check are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

from graphql import ExecutionResult as GraphQLExecutionResult
from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    OperationDefinitionNode,
    OperationType,
    VariableNode,
    Visitor,
    visit,
)

from chorus.graphql.execution.executor import ChorusExecutionContext
from chorus.resolvers.context import RequestContext
from chorus.subscriptions.delivery_groups import DirectSink

CURRENT_SINK: ContextVar[DirectSink | None] = ContextVar("chorus_direct_sink", default=None)
"""The socket sink of the operation whose task this is (``None``: none, every event goes its way).

Set by :class:`~chorus.graphql.websocket.handler.TransportWSHandler` (a
:class:`~chorus.graphql.websocket.socket_sink.SocketSink`), read by ``playlistEvents``."""


@dataclass(frozen=True, slots=True)
class SharedEvent:
    """An item of ``playlistEvents`` that its group may execute once.

    Attributes:
        make: builds what the field resolves to (the strawberry object);
            called only by the subscriber that executes the version.
        group: its subscription's :func:`group_key` (made once, as it started).
        version: the version it renders.
        committed_at: when it committed (seconds since the epoch), for the
            delivery latency.
    """

    make: Callable[[], object]
    group: Hashable
    version: int
    committed_at: float


class EncodedData(dict[str, Any]):
    """An event's ``data``, carrying its ``next`` payload already encoded as JSON."""

    encoded: str = ""
    """``{"data": …}`` as JSON text."""
    committed_at: float = 0.0
    """When the version committed (seconds since the epoch)."""


def group_key(
    playlist_id: str,
    operation: OperationDefinitionNode,
    fragments: Mapping[str, FragmentDefinitionNode],
    variables: Mapping[str, Any],
) -> Hashable:
    """The delivery group of a ``playlistEvents`` subscription.

    Same playlist, same document text, same operation, and the same values of
    the variables the selection *below* the root field uses: the same
    execution of a version (the audience is decided per rendering,
    :class:`Rendered`). The root field's own arguments (``sinceVersion``)
    choose which versions a stream gets, not how one renders, so subscribers
    who started at different versions share a group.
    """
    document: object = operation.loc.source.body if operation.loc else id(operation)
    name = operation.name.value if operation.name else ""
    used = _variables_below_root(operation, fragments)
    values = {k: v for k, v in variables.items() if k in used}
    return (playlist_id, document, name, json.dumps(values, sort_keys=True, default=repr))


def _variables_below_root(
    operation: OperationDefinitionNode, fragments: Mapping[str, FragmentDefinitionNode]
) -> frozenset[str]:
    """Variables the operation uses anywhere but in its root fields' arguments."""
    collect = _Variables()
    for selection in operation.selection_set.selections:
        if isinstance(selection, FieldNode):
            if selection.selection_set is not None:
                visit(selection.selection_set, collect)
            for directive in selection.directives or ():
                visit(directive, collect)
        else:  # a fragment at the root: every variable in it counts
            visit(selection, collect)
    for fragment in fragments.values():
        visit(fragment, collect)
    return frozenset(collect.names)


class _Variables(Visitor):
    """The names of the variables a visit passes (a module-level class: one made per
    call would be a cycle of objects left to the collector at every subscribe)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def enter_variable(self, node: VariableNode, *_: object) -> None:
        self.names.add(node.name.value)


def next_frame(operation_id: str, encoded_payload: str) -> str:
    """The ``next`` message of ``graphql-transport-ws`` for one socket, from an encoded payload."""
    return f'{{"id":{json.dumps(operation_id)},"type":"next","payload":{encoded_payload}}}'


class DeliveryExecutor(ChorusExecutionContext):
    """Chorus's executor (:mod:`chorus.graphql.execution.executor`): a live event once a group."""

    _event: SharedEvent | None = None

    def build_per_event_executor(self, payload: Any) -> Any:
        if not isinstance(payload, SharedEvent):
            return super().build_per_event_executor(payload)
        # The root value is made only if this subscriber is the one to execute.
        executor = cast("DeliveryExecutor", super().build_per_event_executor(None))
        executor._event = payload
        return executor

    def execute_operation(self, serially: bool | None = None) -> Any:
        event = self._event
        context = self.context_value
        hub = context.services.hub if isinstance(context, RequestContext) else None
        if event is None:
            if self.operation.operation is OperationType.SUBSCRIPTION:
                return self.execute_event(serially)  # an event of its own (not shared)
            return super().execute_operation(serially)
        if hub is None:
            self.root_value = event.make()
            return self.execute_event(serially)
        assert isinstance(context, RequestContext)
        return hub.renders.render(
            event.group,
            event.version,
            context.identity.viewer_id or "",
            lambda: self._render(context, event, serially),
        )

    def execute_event(self, serially: bool | None = None) -> Any:
        """The execution of one event (its root value set): graphql-core's; a subclass
        may run a plan (:mod:`chorus.graphql.execution.planned`) and fall back to this."""
        return super().execute_operation(serially)

    async def _render(
        self, context: RequestContext, event: SharedEvent, serially: bool | None
    ) -> Rendered:
        # Its own context: fresh DataLoaders (one media lookup for the group)
        # and its own record of what it read, whatever else runs on the socket.
        fresh = context.fork()
        self.context_value = fresh
        self.root_value = event.make()
        result = self.execute_event(serially)
        if self.is_awaitable(result):
            result = await result
        assert isinstance(result, GraphQLExecutionResult)
        if result.errors or result.data is None:
            return Rendered(result, shared=False)
        data = EncodedData(result.data)
        data.encoded = json.dumps({"data": result.data})
        data.committed_at = event.committed_at
        return Rendered(GraphQLExecutionResult(data, None), shared=fresh.reads.record.shared)


class PlainFieldsDeliveryExecutor(DeliveryExecutor):
    """:class:`DeliveryExecutor` with every field executed by graphql-core
    (``CHORUS_FAST_FIELD_EXECUTION=false``): the fast path's plain twin."""

    fast_fields = False


class Rendered(GraphQLExecutionResult):
    """One execution of a version for a group; ``shared``: every viewer of the group may get it."""

    shared: bool

    def __init__(self, result: GraphQLExecutionResult, *, shared: bool) -> None:
        super().__init__(result.data, result.errors, result.extensions)
        self.shared = shared


__all__ = [
    "DeliveryExecutor",
    "EncodedData",
    "PlainFieldsDeliveryExecutor",
    "Rendered",
    "SharedEvent",
    "group_key",
    "next_frame",
]
