"""The fast path for plain leaf fields answers exactly what graphql-core would.

The same documents run on one schema with strawberry's execution context and
with :class:`~chorus.graphql.execution.executor.ChorusExecutionContext`: data, errors
(message, path, locations) and null propagation must be equal.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

import pytest
import strawberry
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from chorus.graphql.execution.executor import ChorusExecutionContext


@strawberry.enum
class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@strawberry.type
class Inner:
    name: str
    nickname: str | None
    tags: list[str]
    maybe_tags: list[str] | None
    colour: Colour
    when: datetime
    count: int

    @strawberry.field
    def shout(self) -> str:
        return self.name.upper()

    @strawberry.field
    async def later(self) -> str:
        return self.name + "!"


@strawberry.interface
class Named:
    label: str


@strawberry.type
class Thing(Named):
    """Implements an interface: strawberry gives it an ``is_type_of``."""

    size: int


@strawberry.type
class Outer:
    id: strawberry.ID
    inner: Inner
    items: list[Inner]
    broken: Inner | None
    bad_items: list[Inner] | None
    things: list[Thing]
    wrong_thing: Thing | None


def inner(name: Any = "a", **kw: Any) -> Inner:
    values: dict[str, Any] = {
        "name": name,
        "nickname": None,
        "tags": ["x", "y"],
        "maybe_tags": None,
        "colour": Colour.BLUE,
        "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "count": 3,
    }
    values.update(kw)
    return Inner(**values)


@strawberry.type
class Query:
    @strawberry.field
    def outer(self) -> Outer:
        return Outer(
            id=strawberry.ID("o1"),
            inner=inner(),
            items=[inner("b"), inner("c", nickname="see", tags=[])],
            # Values the fast path must hand back: a None for a non-null field,
            # a list holding None, a value the Int scalar refuses.
            broken=inner(None, tags=["ok", None], count="many"),
            bad_items=[inner("d"), inner(None), inner("e")],
            things=[Thing(label="t", size=1), Thing(label="u", size=2)],
            wrong_thing=inner("not a thing"),  # type: ignore[arg-type]
        )


def schemas() -> tuple[strawberry.Schema, strawberry.Schema]:
    plain = strawberry.Schema(Query, execution_context_class=StrawberryGraphQLCoreExecutionContext)
    fast = strawberry.Schema(Query, execution_context_class=ChorusExecutionContext)
    return plain, fast


DOCUMENTS = [
    "{ outer { id inner { name nickname tags maybeTags colour when count } } }",
    "{ outer { items { n: name name tags shout later } } }",
    "{ outer { ...F items { ... on Inner { colour } } } } fragment F on Outer { id }",
    "{ outer { inner { name @skip(if: true) count @include(if: true) } } }",
    "{ outer { broken { name } } }",
    "{ outer { broken { tags } } }",
    "{ outer { broken { count } } }",
    "{ outer { broken { colour nickname } } }",
    "{ outer { badItems { name later } items { name } } }",
    "{ outer { things { label size } wrongThing { label } } }",
    "{ outer { things { ... on Named { label } } } }",
]


def shape(result: Any) -> Any:
    errors = [
        (e.message, e.path, [(loc.line, loc.column) for loc in e.locations or []])
        for e in result.errors or []
    ]
    return result.data, sorted(errors, key=repr)


@pytest.mark.parametrize("document", DOCUMENTS)
async def test_the_fast_path_answers_what_graphql_core_answers(document: str) -> None:
    plain, fast = schemas()
    expected = await plain.execute(document)
    got = await fast.execute(document)
    assert shape(got) == shape(expected)


async def test_plain_leaves_do_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only fields with resolvers go graphql-core's way."""
    _, fast = schemas()
    executed: list[str] = []
    real = ChorusExecutionContext.execute_field

    def counting(self: Any, parent_type: Any, source: Any, details: Any, *rest: Any) -> Any:
        executed.append(f"{parent_type.name}.{details[0].node.name.value}")
        return real(self, parent_type, source, details, *rest)

    monkeypatch.setattr(ChorusExecutionContext, "execute_field", counting)
    document = "{ outer { id inner { name tags colour when shout } things { size } } }"
    result = await fast.execute(document)
    assert result.errors is None
    assert sorted(executed) == ["Inner.shout", "Query.outer"]
