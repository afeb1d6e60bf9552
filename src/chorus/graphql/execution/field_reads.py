"""How a plan reads a strawberry field's value: an attribute, or its resolver called directly.

Strawberry wraps each resolver (``GraphQLCoreConverter.from_resolver``): for a
field without a resolver of ours, a read of the attribute (its
``_get_basic_result``); for the others, a wrapper that builds strawberry's
``Info``, converts the GraphQL arguments to Python values, runs the field's
extensions and exception handlers, then calls the resolver. For a resolver
with no field extensions, no exception handlers and only arguments strawberry
hands on as graphql-core coerced them (scalars: :func:`passed_as_coerced`),
that wrapper does nothing but build the ``Info``, pass the source as ``self``,
``root`` or ``parent`` and each argument under its Python name; a plan does
just that (:func:`direct_resolver`). On the cold page the wrapper's argument
conversion of ``playlist(id:)`` and ``entries(first:)`` was ~4% of a request's
CPU (py-spy). Every other resolver is called through strawberry's wrapper, as
graphql-core calls it. The strawberry internals read here are named in
``tests/unit/test_library_internals.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphql import GraphQLField, GraphQLNonNull, GraphQLScalarType, VariableNode, visit
from graphql.language import Visitor
from strawberry.relay import GlobalID
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.base import StrawberryMaybe, StrawberryOptional, StrawberryType
from strawberry.types.lazy_type import LazyType


def plain_attribute(field_def: GraphQLField) -> str | None:
    """The attribute strawberry's resolver of ``field_def`` reads, if that is all it does."""
    resolve = field_def.resolve
    if (
        field_def.args
        or not getattr(resolve, "_is_default", False)
        or getattr(resolve, "__name__", "") != "_get_basic_result"
    ):
        return None
    definition = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    attribute = getattr(definition, "python_name", None)
    return attribute if isinstance(attribute, str) else None


def direct_resolver(field_def: GraphQLField) -> tuple[Callable[..., Any], Any, bool] | None:
    """``(call, make_info, wants_info)`` for a strawberry resolver without field extensions
    or exception handlers whose arguments strawberry passes on as graphql-core coerced
    them (:func:`passed_as_coerced`): the resolver is called directly, as strawberry's
    wrapper would call it (``self``/``root``/``parent`` the source, ``info`` its ``Info``,
    each argument under its Python name), without the wrapper's argument conversion and
    extension chain; else ``None``.

    ``call(source, info, arguments)``: ``arguments`` graphql-core's coerced values by
    GraphQL name (``get_argument_values``), ``None`` for a field without arguments."""
    resolve = field_def.resolve
    definition = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    resolver = getattr(definition, "base_resolver", None)
    if (
        resolver is None
        or getattr(definition, "extensions", True)
        or getattr(resolve, "__name__", "") not in ("_resolver", "_async_resolver")
    ):
        return None
    names = passed_as_coerced(field_def, definition)
    if names is None:
        return None
    code = getattr(resolve, "__code__", None)
    cells = getattr(resolve, "__closure__", None) or ()
    closure = dict(zip(getattr(code, "co_freevars", ()), cells, strict=False))
    handlers, make_info = (
        closure.get("field_exception_handlers"),
        closure.get("_strawberry_info_from_graphql"),
    )
    if handlers is None or handlers.cell_contents or make_info is None:
        return None
    by_name: dict[str, str] = {}
    for role in ("parent_parameter", "root_parameter"):
        parameter = getattr(resolver, role)
        if parameter is not None:
            by_name[parameter.name] = "source"
    info = resolver.info_parameter
    takes_self = resolver.self_parameter is not None
    function = resolver.wrapped_func
    source_names = tuple(by_name)
    info_name = info.name if info is not None else None

    def call(source: Any, info_value: Any, arguments: dict[str, Any] | None = None) -> Any:
        kwargs = {name: source for name in source_names}
        if info_name is not None:
            kwargs[info_name] = info_value
        if arguments:
            for graphql_name, python_name in names:
                if graphql_name in arguments:
                    kwargs[python_name] = arguments[graphql_name]
        return function(source, **kwargs) if takes_self else function(**kwargs)

    return call, make_info.cell_contents, info is not None


def passed_as_coerced(
    field_def: GraphQLField, definition: Any
) -> tuple[tuple[str, str], ...] | None:
    """``(GraphQL name, Python name)`` of each argument of ``field_def`` when strawberry's
    conversion (``convert_arguments``) hands every one to the resolver as graphql-core
    coerced it; ``None`` when one may be converted to something else.

    So it is for an argument of a scalar type, ``null`` allowed or not, other than
    ``GlobalID`` (made from its text) and ``Maybe`` (wrapped in ``Some``): strawberry's
    ``convert_argument`` returns such a value as is. Lists (copied), enums and input
    objects (built) are left to strawberry's wrapper.
    """
    arguments = getattr(definition, "arguments", None)
    if arguments is None or len(arguments) != len(field_def.args):
        return None
    # Paired by strawberry's back reference: an argument's GraphQL name is its
    # ``graphql_name`` only when given; else the schema's name converter made it
    # (``min_version`` is ``minVersion``), which a lookup by name missed.
    by_argument = {
        id((a.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)): (name, a)
        for name, a in field_def.args.items()
    }
    names = []
    for argument in arguments:
        graphql_name, graphql_argument = by_argument.get(id(argument), (None, None))
        if graphql_name is None or graphql_argument is None:
            return None
        graphql_type = graphql_argument.type
        if isinstance(graphql_type, GraphQLNonNull):
            graphql_type = graphql_type.of_type
        type_ = argument.type
        if isinstance(type_, StrawberryOptional) and not isinstance(type_, StrawberryMaybe):
            type_ = type_.of_type
        if (
            not isinstance(graphql_type, GraphQLScalarType)
            or isinstance(type_, StrawberryType | LazyType)
            or type_ is GlobalID
        ):
            return None
        names.append((graphql_name, argument.python_name))
    return tuple(names)


def field_plan_of(field_def: GraphQLField) -> Any:
    """The field plan factory the resolver of ``field_def`` names (:func:`chorus.graphql.
    execution.plans.field_plan`), when a plan may call it in the resolver's place: as for
    :func:`direct_resolver`, no field extensions, no exception handlers, arguments as
    graphql-core coerced them; else ``None``."""
    definition = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    resolver = getattr(definition, "base_resolver", None)
    factory = getattr(getattr(resolver, "wrapped_func", None), FIELD_PLAN, None)
    if factory is None or direct_resolver(field_def) is None:
        return None
    return factory


FIELD_PLAN = "chorus_field_plan"
"""The attribute of a resolver function naming its field plan factory."""


def strawberry_is_type_of(check: Callable[..., Any]) -> bool:
    """Whether an object type's ``is_type_of`` is strawberry's (an ``isinstance``; the
    resolve info it is given is unused, so a plan passes ``None``)."""
    return getattr(check, "__module__", None) == GraphQLCoreConverter.__module__


def uses_variables(node: Any) -> bool:
    """Whether a variable appears in ``node``'s arguments (at any depth)."""

    class _Finder(Visitor):
        found = False

        def enter_variable(self, variable: VariableNode, *_: Any) -> None:
            self.found = True

    finder = _Finder()
    for argument in node.arguments or ():
        visit(argument, finder)
    return finder.found


__all__ = [
    "FIELD_PLAN",
    "direct_resolver",
    "field_plan_of",
    "passed_as_coerced",
    "plain_attribute",
    "strawberry_is_type_of",
    "uses_variables",
]
