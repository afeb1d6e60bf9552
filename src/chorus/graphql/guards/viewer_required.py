"""An operation that needs a viewer is refused before validation when there is none.

Every root field but introspection (``__schema``, ``__type``, ``__typename``)
needs a viewer, so a request without a valid token can only ever be answered
``UNAUTHENTICATED`` (or ``SERVICE_UNAVAILABLE`` when the identity provider's
keys cannot be fetched). Validating its document first spent the work for
nothing, and anyone could ask for it: graphql-core's rules over a new
document near the 5,000-token limit (25 aliased ``atVersion { entries }``
pages, each new) take 50–90 ms of the event loop, so a client without a
token sending them one after another held ``/healthz`` with them.

The answer is one error with the resolvers' code and reason, and no
``data`` entry: a request error, raised before execution began
(:mod:`chorus.graphql.execution.result_shape`). The
document's own mistakes, if any, are not reported until a token comes with
it; introspection alone is validated as before, so tools read the schema
without one.

A persisted document asked for by hash alone is refused the same way,
before the hash is looked up
(:func:`chorus.graphql.http.refusals.refusal_without_viewer`): whether it is
registered makes no difference to a request without a token.
"""

from __future__ import annotations

from collections.abc import Iterator

from graphql import GraphQLError, get_operation_ast
from strawberry.extensions import SchemaExtension

from chorus.graphql.guards.cost import root_fields
from chorus.resolvers.context import RequestContext
from chorus.resolvers.request_errors import RequestError


class ViewerBeforeValidation(SchemaExtension):
    """Refuses, before any validation rule runs, an operation needing a viewer that has none.

    The refusal is the pre-execution error of :meth:`RequestContext.viewer`:
    ``UNAUTHENTICATED`` with the token's reason (no token, an invalid or an
    expired one), ``SERVICE_UNAVAILABLE`` when it could not be checked.
    Linear in the document: each fragment's root selections are read once.
    """

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        request = context.context
        document = context.graphql_document
        if (
            context.pre_execution_errors
            or document is None
            or not isinstance(request, RequestContext)
        ):
            yield
            return
        try:
            request.viewer()
        except RequestError as refused:
            # Only then is the document read: with a viewer every operation may go on.
            operation = get_operation_ast(document, context.operation_name)
            # No such operation: strawberry's own answer says which one to name.
            if operation is not None and not all(
                name.startswith("__") for name in root_fields(document, operation)
            ):
                context.pre_execution_errors = [GraphQLError(str(refused), original_error=refused)]
        yield


__all__ = ["ViewerBeforeValidation"]
