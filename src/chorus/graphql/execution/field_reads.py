"""How a plan reads a strawberry field's value: an attribute, or its resolver called directly.

Strawberry wraps each resolver (``GraphQLCoreConverter.from_resolver``): for a
field without a resolver of ours, a read of the attribute (its
``_get_basic_result``); for the others, a wrapper that builds strawberry's
``Info``, converts the GraphQL arguments to Python values, runs the field's
extensions and exception handlers, then calls the resolver. For a resolver
with no field extensions and no exception handlers whose arguments a plan can
convert as strawberry does (:func:`argument_conversions`: scalars and enums as
graphql-core coerced them, lists and input objects built by a conversion made
once per field), that wrapper does nothing but build the ``Info``, pass the
source as ``self``, ``root`` or ``parent`` and each argument, converted, under
its Python name; a plan does just that (:func:`direct_resolver`). On the cold
page the wrapper's argument conversion of ``playlist(id:)`` and
``entries(first:)`` was ~4% of a request's CPU, on ``addEntries`` ~6% (py-spy).
Every other resolver is called through strawberry's wrapper, as graphql-core
calls it. The strawberry internals read here are named in
``tests/unit/test_library_internals.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING
from typing import Any

from graphql import (
    GraphQLEnumType,
    GraphQLField,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLScalarType,
    VariableNode,
    visit,
)
from graphql.language import Visitor
from strawberry.relay import GlobalID
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.base import (
    StrawberryList,
    StrawberryMaybe,
    StrawberryOptional,
    has_object_definition,
)
from strawberry.types.lazy_type import LazyType
from strawberry.types.unset import UNSET


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
    or exception handlers whose arguments a plan converts as strawberry would
    (:func:`argument_conversions`): the resolver is called directly, as strawberry's
    wrapper would call it (``self``/``root``/``parent`` the source, ``info`` its ``Info``,
    each argument under its Python name, converted), without the wrapper's generic
    argument conversion and extension chain; else ``None``.

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
    names = argument_conversions(field_def, definition)
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
            for graphql_name, python_name, convert in names:
                if graphql_name in arguments:
                    value = arguments[graphql_name]
                    kwargs[python_name] = value if convert is None else convert(value)
        return function(source, **kwargs) if takes_self else function(**kwargs)

    return call, make_info.cell_contents, info is not None


Conversion = Callable[[Any], Any]
"""A coerced GraphQL input value to the Python value strawberry's ``convert_argument`` makes."""


class _Unconverted(Exception):
    """A type whose conversion is left to strawberry's wrapper."""


def argument_conversions(
    field_def: GraphQLField, definition: Any
) -> tuple[tuple[str, str, Conversion | None], ...] | None:
    """``(GraphQL name, Python name, conversion)`` of each argument of ``field_def``, the
    conversion ``None`` when strawberry hands the value on as graphql-core coerced it
    (a scalar's or an enum's, ``null`` allowed or not); ``None`` when one is left to
    strawberry's wrapper.

    Arguments are paired with strawberry's by its back reference: an argument's GraphQL
    name is its ``graphql_name`` only when given; else the schema's name converter made
    it (``min_version`` is ``minVersion``), which a lookup by name missed.

    A conversion is built once per field from the GraphQL type and strawberry's, and
    does what ``strawberry.types.arguments.convert_argument`` does per value (``null``
    and unset kept; a list copied, its items converted; an input object built from its
    fields under their Python names, a nullable field without a default ``None``), with
    each field's name and type resolved once instead of per request: strawberry's
    generic walk was ~6% of an ``addEntries`` request's CPU (py-spy, bench/writes.py).
    Left to the wrapper: ``GlobalID`` (made from its text), ``Maybe`` (wrapped in
    ``Some``), ``@oneOf`` inputs and inputs with a ``from_input`` of their own.
    ``tests/unit/test_argument_conversions.py`` checks the result against
    ``convert_arguments`` on every mutation of the schema.
    """
    arguments = getattr(definition, "arguments", None)
    if arguments is None or len(arguments) != len(field_def.args):
        return None
    by_argument = {
        id((a.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)): (name, a)
        for name, a in field_def.args.items()
    }
    conversions = []
    for argument in arguments:
        graphql_name, graphql_argument = by_argument.get(id(argument), (None, None))
        if graphql_name is None or graphql_argument is None:
            return None
        try:
            convert = _conversion(graphql_argument.type, argument.type)
        except _Unconverted:
            return None
        conversions.append((graphql_name, argument.python_name, convert))
    return tuple(conversions)


def _conversion(graphql_type: GraphQLInputType, type_: Any) -> Conversion | None:
    """The conversion of a value of ``graphql_type`` (strawberry's ``type_``); ``None``:
    the value as it is.

    Raises:
        _Unconverted: a type left to strawberry's wrapper.
    """
    if isinstance(type_, StrawberryMaybe):
        raise _Unconverted("Maybe")
    if isinstance(type_, StrawberryOptional):
        type_ = type_.of_type
    if isinstance(type_, LazyType):
        type_ = type_.resolve_type()
    if isinstance(graphql_type, GraphQLNonNull):
        graphql_type = graphql_type.of_type
    if isinstance(graphql_type, GraphQLScalarType | GraphQLEnumType):
        if type_ is GlobalID:
            raise _Unconverted("GlobalID")
        return None
    if isinstance(graphql_type, GraphQLList):
        if not isinstance(type_, StrawberryList):
            raise _Unconverted(f"{graphql_type}: not a strawberry list")
        return _list_conversion(_conversion(graphql_type.of_type, type_.of_type))
    if isinstance(graphql_type, GraphQLInputObjectType):
        return _input_conversion(graphql_type, type_)
    raise _Unconverted(str(graphql_type))


def _list_conversion(item: Conversion | None) -> Conversion:
    def convert(value: Any) -> Any:
        if value is None or value is UNSET:
            return value
        if item is None:
            return list(value)  # a copy: graphql-core shares a default list
        return [item(x) for x in value]

    return convert


def _input_conversion(graphql_type: GraphQLInputObjectType, type_: Any) -> Conversion:
    definition = (graphql_type.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if (
        definition is None
        or not has_object_definition(type_)
        or type_.__strawberry_definition__ is not definition
        or not definition.is_input
        or definition.is_one_of
        or definition.from_input is not None
        or len(definition.fields) != len(graphql_type.fields)
    ):
        raise _Unconverted(graphql_type.name)
    # What strawberry sets before the given fields: None for each field with no default.
    unset = {
        f.python_name: None
        for f in definition.fields
        if f.default_value is MISSING and f.default_factory is MISSING
    }
    fields = []
    for name, field in graphql_type.fields.items():
        backref = (field.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
        if backref is None or not any(f is backref for f in definition.fields):
            raise _Unconverted(f"{graphql_type.name}.{name}")
        inner = _conversion(field.type, backref.resolve_type(type_definition=definition))
        fields.append((name, backref.python_name, inner))

    def convert(value: Any) -> Any:
        if value is None or value is UNSET:
            return value
        kwargs = dict(unset)
        for name, python_name, inner in fields:
            if name in value:
                given = value[name]
                kwargs[python_name] = given if inner is None else inner(given)
        return type_(**kwargs)

    return convert


def field_plan_of(field_def: GraphQLField) -> Any:
    """The field plan factory the resolver of ``field_def`` names (:func:`chorus.graphql.
    execution.plans.field_plan`), when a plan may call it in the resolver's place: as for
    :func:`direct_resolver`, no field extensions, no exception handlers, arguments a plan
    converts; else ``None``."""
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
    "argument_conversions",
    "direct_resolver",
    "field_plan_of",
    "plain_attribute",
    "strawberry_is_type_of",
    "uses_variables",
]
