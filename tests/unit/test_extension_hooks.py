"""The cached extension hooks run exactly as strawberry's own runner runs them.

Recording extensions of every hook kind (generator, async generator, plain,
coroutine; one that suppresses an error, one that raises) go through
strawberry's :class:`SchemaExtensionsRunner` and through
:class:`CachedHooksRunner`; the records and the outcome must be the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import strawberry
from graphql import parse
from hypothesis import given, settings
from hypothesis import strategies as st
from strawberry.extensions import SchemaExtension
from strawberry.extensions.runner import SchemaExtensionsRunner

from chorus.graphql.execution.extension_hooks import CachedHooksRunner
from chorus.graphql.schema.build import build_schema

STAGES = ("operation", "parsing", "validation", "executing")


def extensions(
    log: list[str], *, suppress: bool = False, fail_in: str = "", fail_out: str = ""
) -> list[Any]:
    class Generator(SchemaExtension):
        def on_operation(self) -> Iterator[None]:
            log.append("gen operation in")
            try:
                yield
            except ValueError as error:
                log.append(f"gen operation saw {error}")
                if not suppress:
                    raise
            finally:
                log.append("gen operation out")

        def on_execute(self) -> Iterator[None]:
            log.append("gen execute in")
            if fail_in == "gen execute":
                raise RuntimeError("gen execute")
            try:
                yield
            except LookupError as error:
                # Sees a later hook's failure on leaving; may swallow it.
                log.append(f"gen execute saw {type(error).__name__}: {error}")
                if not suppress:
                    raise
            log.append("gen execute out")

        def on_validate(self) -> Iterator[None]:
            log.append("gen validate in")
            yield
            log.append("gen validate out")
            if fail_out == "gen validate":
                raise LookupError("gen validate out")

    class AsyncGenerator(SchemaExtension):
        async def on_validate(self) -> AsyncIterator[None]:  # type: ignore[override]
            log.append("agen validate in")
            try:
                yield
            except LookupError as error:
                log.append(f"agen validate saw {type(error).__name__}: {error}")
                if not suppress:
                    raise
            log.append("agen validate out")

        async def on_execute(self) -> AsyncIterator[None]:  # type: ignore[override]
            log.append("agen execute in")
            yield
            log.append("agen execute out")
            if fail_out == "agen execute":
                raise KeyError("agen execute out")
            if fail_out == "agen execute twice":
                raise TypeError("agen execute out")

        async def on_operation(self) -> AsyncIterator[None]:  # type: ignore[override]
            log.append("agen operation in")
            yield
            log.append("agen operation out")

    class Plain(SchemaExtension):
        def on_parse(self) -> None:  # type: ignore[override]
            log.append(f"plain parse {id(self) == id(plain)}")

    class Coroutine(SchemaExtension):
        async def on_execute(self) -> None:  # type: ignore[override]
            log.append("coroutine execute")

    plain = Plain()
    return [Generator(), AsyncGenerator(), plain, Coroutine(), SchemaExtension()]


async def drive(runner: SchemaExtensionsRunner, log: list[str], raise_in: str) -> None:
    for stage in STAGES:
        try:
            async with getattr(runner, stage)():
                log.append(f"inside {stage}")
                if stage == raise_in:
                    raise ValueError(stage)
        except Exception as error:
            context = error.__context__
            log.append(f"{stage} raised {type(error).__name__}: {error} after {context!r}")


@pytest.mark.parametrize("suppress", [False, True])
@pytest.mark.parametrize("raise_in", ["", "operation", "validation", "executing"])
@pytest.mark.parametrize("fail_in", ["", "gen execute"])
@pytest.mark.parametrize("fail_out", ["", "gen validate", "agen execute", "agen execute twice"])
async def test_hooks_run_as_strawberry_runs_them(
    suppress: bool, raise_in: str, fail_in: str, fail_out: str
):
    """The same hooks, records and errors, whether a hook fails on entering, the stage
    raises, or a hook fails on leaving (seen, and swallowed or not, by the hooks left
    after it)."""
    records = []
    for runner_class in (SchemaExtensionsRunner, CachedHooksRunner):
        log: list[str] = []
        for _ in range(2):  # the second time, the cache answers
            found = extensions(log, suppress=suppress, fail_in=fail_in, fail_out=fail_out)
            runner = runner_class(None, found)  # type: ignore[arg-type]
            await drive(runner, log, raise_in)
        records.append(log)
    strawberry_log, cached_log = records
    assert cached_log == strawberry_log
    assert "plain parse True" in cached_log  # bound to the request's own instance


def test_a_hook_that_is_not_callable_is_refused_alike():
    class Broken(SchemaExtension):
        on_operation = 3  # type: ignore[assignment]

    for runner_class in (SchemaExtensionsRunner, CachedHooksRunner):
        with pytest.raises(ValueError, match="must be callable"):
            runner_class(None, [Broken()]).operation()  # type: ignore[arg-type]


def test_the_chorus_schema_uses_the_cached_runner():
    schema = build_schema()
    assert isinstance(schema.create_extensions_runner(None, []), CachedHooksRunner)  # type: ignore[arg-type]


async def test_a_request_through_the_schema_sees_every_hook():
    log: list[str] = []

    @strawberry.type
    class Query:
        @strawberry.field
        def hello(self) -> str:
            log.append("resolve")
            return "hi"

    schema = strawberry.Schema(query=Query, extensions=[lambda: extensions(log)[0]])
    schema.create_extensions_runner = (  # type: ignore[method-assign]
        lambda context, found: CachedHooksRunner(context, found)
    )
    result = await schema.execute("{ hello }")
    assert result.data == {"hello": "hi"}
    assert log == [
        "gen operation in",
        "gen validate in",
        "gen validate out",
        "gen execute in",
        "resolve",
        "gen execute out",
        "gen operation out",
    ]


BEHAVIOURS = (
    "plain",
    "fails entering",
    "no yield",
    "fails leaving",
    "yields twice",
    "swallows",
    "replaces",
)


def _stage_extensions(log: list[str], kinds: list[tuple[str, bool]]) -> list[Any]:
    """One extension per (behaviour, async) of ``kinds``, each with an ``on_execute`` hook."""
    made = []
    for index, (behaviour, is_async) in enumerate(kinds):

        def body(index: int = index, behaviour: str = behaviour) -> Iterator[str]:
            """The hook's steps, shared by its sync and async forms: yields where it yields."""
            log.append(f"{index} in")
            if behaviour == "fails entering":
                raise KeyError(f"{index} entering")
            if behaviour == "no yield":
                return
            try:
                yield "stage"
            except Exception as error:
                log.append(f"{index} saw {type(error).__name__}: {error}")
                if behaviour == "swallows":
                    return
                if behaviour == "replaces":
                    raise LookupError(f"{index} instead") from None
                raise
            finally:
                log.append(f"{index} finally")
            log.append(f"{index} out")
            if behaviour == "fails leaving":
                raise TypeError(f"{index} leaving")
            if behaviour == "yields twice":
                yield "again"

        if is_async:

            class Async(SchemaExtension):
                async def on_execute(self, body: Any = body) -> AsyncIterator[None]:  # type: ignore[override]
                    steps = body()
                    for _ in steps:
                        try:
                            yield
                        except BaseException as error:
                            try:
                                steps.throw(error)
                            except StopIteration:
                                return

            made.append(Async())
        else:

            class Sync(SchemaExtension):
                def on_execute(self, body: Any = body) -> Iterator[Any]:
                    yield from body()

            made.append(Sync())
    return made


def _chain(error: BaseException | None) -> list[str]:
    found = []
    while error is not None and len(found) < 6:
        found.append(f"{type(error).__name__}: {error}")
        error = error.__context__
    return found


async def _run_stage(
    runner: SchemaExtensionsRunner, log: list[str], fail: bool, outer: bool
) -> list[str] | None:
    async def stage() -> None:
        async with runner.executing():
            log.append("inside")
            if fail:
                raise ValueError("the stage")

    try:
        if outer:
            try:
                raise OSError("being handled")
            except OSError:
                await stage()
        else:
            await stage()
    except BaseException as error:
        return _chain(error)
    return None


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(st.tuples(st.sampled_from(BEHAVIOURS), st.booleans()), max_size=4),
    fail=st.booleans(),
    outer=st.booleans(),
)
def test_a_stage_runs_its_hooks_as_strawberry_runs_them(
    kinds: list[tuple[str, bool]], fail: bool, outer: bool
):
    """Any mix of hooks, sync and async, that fail entering or leaving, stop early, yield
    twice, swallow or replace the error they see, in a stage that fails or not, entered
    while another exception is handled or not: the same records, and the same error with
    the same chain of contexts, through both runners."""
    outcomes = []
    for runner_class in (SchemaExtensionsRunner, CachedHooksRunner):
        log: list[str] = []
        runner = runner_class(None, _stage_extensions(log, kinds))  # type: ignore[arg-type]
        outcomes.append((asyncio.run(_run_stage(runner, log, fail, outer)), log))
    assert outcomes[1] == outcomes[0]


async def test_extension_results_are_strawberrys():
    """Only classes with their own ``get_results`` are asked, and the answer is the same:
    theirs in order (sync and async), then the context's own results."""

    class Sync(SchemaExtension):
        def get_results(self) -> dict[str, Any]:
            return {"sync": 1, "both": "sync"}

    class Async(SchemaExtension):
        async def get_results(self) -> dict[str, Any]:  # type: ignore[override]
            return {"async": 2, "both": "async"}

    class Context:
        def __init__(self) -> None:
            self.extensions_results = {"context": 3, "both": "context"}

    found = [SchemaExtension(), Sync(), Async(), SchemaExtension()]
    answers = [
        await runner(None, found).get_extensions_results(Context())  # type: ignore[arg-type]
        for runner in (SchemaExtensionsRunner, CachedHooksRunner)
    ]
    assert answers[1] == answers[0] == {"sync": 1, "async": 2, "context": 3, "both": "context"}
    assert list(answers[1]) == list(answers[0])


def test_the_operation_type_follows_the_document_and_the_name():
    """The schema's execution context finds the type once, but again when the document
    or the operation name it is asked for changes."""
    schema = build_schema()
    context = schema._create_execution_context(  # type: ignore[attr-defined]
        query=None, allowed_operation_types=()
    )
    with pytest.raises(RuntimeError):
        context.operation_type  # noqa: B018 (no document)
    first = parse("query A { __typename } mutation B { __typename }")
    context.graphql_document = first
    assert context.operation_type.value == "query"
    context._provided_operation_name = "B"
    assert context.operation_type.value == "mutation"
    context.graphql_document = parse("subscription B { __typename }")
    assert context.operation_type.value == "subscription"
    context._provided_operation_name = "C"
    with pytest.raises(RuntimeError):
        context.operation_type  # noqa: B018 (no such operation)
