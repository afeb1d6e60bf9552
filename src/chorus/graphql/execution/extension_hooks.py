"""Strawberry's extension hooks, each wrapped once per extension class, not per request.

Strawberry's :class:`~strawberry.extensions.runner.SchemaExtensionsRunner`
finds each extension's hooks afresh on every request: for each of the four
stages (operation, parsing, validation, execution) it asks ``inspect``
what each of the schema's 13 extensions defines and wraps the method in a
new ``contextlib.contextmanager`` (``functools.update_wrapper`` and all).
On a cold read that was ~5% of the request's CPU (py-spy, ``bench/peers.py``'s
``cold`` row), for an answer that depends only on the extension's class.

:class:`CachedHooksRunner` asks once per (class, stage) and keeps the
unbound hook; a request calls it with its own extension instance, as
strawberry's ``types.MethodType`` binds it.

Entering and leaving a stage drive the hooks' generators directly.
Strawberry wraps each in a ``contextmanager`` and enters them on a
``contextlib.AsyncExitStack``: another ~8% of a cold read's CPU (py-spy,
``ExtensionContextManagerBase.__aenter__``/``__aexit__``), for hooks that,
but in an error, yield once and stop. Here entering calls each hook and
advances it to its ``yield`` (raising ``contextmanager``'s ``RuntimeError`` if
it does not yield), and leaving without an error advances each, last first,
to its end. Whatever departs from that path goes through contextlib's own
code, so the hooks see what strawberry's stack shows them: an error in the
stage is handed to every hook by an exit stack of contextlib's own
context managers around the entered generators, and the first hook that
fails (or yields again) on leaving hands its error, its context fixed as the
stack fixes it, to the hooks before it the same way. As in strawberry, a
hook cannot suppress the stage's error (its ``__aexit__`` returns nothing),
and a hook that failed on entering leaves the hooks before it entered, to be
closed when collected. ``tests/unit/test_extension_hooks.py`` runs recording
extensions of every kind through both runners and compares records, errors
and their contexts.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from asyncio import iscoroutinefunction
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

from strawberry.extensions import SchemaExtension
from strawberry.extensions.context import (
    ExecutingContextManager,
    ExtensionContextManagerBase,
    OperationContextManager,
    ParsingContextManager,
    ValidationContextManager,
    WrappedHook,
)
from strawberry.extensions.runner import SchemaExtensionsRunner
from strawberry.types import ExecutionContext
from strawberry.utils.await_maybe import await_maybe

_Hook = Callable[[SchemaExtension], Any]
"""``extension → a generator`` (or an async generator): the hook's function, unbound."""

_HOOKS: dict[tuple[type[SchemaExtension], str], tuple[_Hook, bool] | None] = {}
"""(extension class, hook name) → (the hook as a generator function, whether it is async),
or None: no hook."""


def _hook(kind: type[SchemaExtension], name: str) -> tuple[_Hook, bool] | None:
    """``kind``'s hook ``name`` as a generator function, as strawberry's ``get_hook`` reads
    it (a plain function or coroutine runs on entering, before the stage), found once."""
    key = (kind, name)
    try:
        return _HOOKS[key]
    except KeyError:
        pass
    hook_fn = getattr(kind, name)
    found: tuple[_Hook, bool] | None
    if hook_fn is getattr(SchemaExtension, name):
        found = None
    elif inspect.isgeneratorfunction(hook_fn):
        found = (hook_fn, False)
    elif inspect.isasyncgenfunction(hook_fn):
        found = (hook_fn, True)
    elif callable(hook_fn):
        found = _from_callable(hook_fn)
    else:
        raise ValueError(f"Hook {name} on {kind} must be callable, received {hook_fn!r}")
    _HOOKS[key] = found
    return found


def _from_callable(func: Callable[[SchemaExtension], Any]) -> tuple[_Hook, bool]:
    """Strawberry's ``from_callable``: a plain hook run on entering, before the stage."""
    if iscoroutinefunction(func):

        async def run_async(extension: SchemaExtension) -> AsyncIterator[None]:
            await func(extension)
            yield

        return run_async, True

    def run(extension: SchemaExtension) -> Iterator[None]:
        func(extension)
        yield

    return run, False


def _decorator(is_async: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """How strawberry makes a hook a context manager: ``asynccontextmanager`` or
    ``contextmanager``."""
    return contextlib.asynccontextmanager if is_async else contextlib.contextmanager


def _stage(base: type[ExtensionContextManagerBase]) -> type[ExtensionContextManagerBase]:
    """``base`` (one stage's context manager) with its hooks found through :func:`_hook`
    and driven directly (see :class:`CachedHooksRunner`)."""

    class Stage(base):  # type: ignore[misc,valid-type]
        def __init__(self, extensions: list[SchemaExtension]) -> None:
            # Not super().__init__: it would look every hook up again.
            name = self.HOOK_NAME
            self._hooks: list[tuple[SchemaExtension, _Hook, bool]] = []
            for extension in extensions:
                found = _hook(type(extension), name)
                if found is not None:
                    self._hooks.append((extension, *found))
            # A deque, as contextlib's exit stack holds its callbacks: a stage a hook failed
            # to enter drops the hooks entered before it in the same order (first first).
            self._entered: deque[tuple[Any, bool]] = deque()

        def __enter__(self) -> None:
            # Synchronous execution (``execute_sync``): strawberry's own, rare.
            self.hooks = [
                WrappedHook(e, _factory(e, hook, is_async), is_async)
                for e, hook, is_async in self._hooks
            ]
            super().__enter__()

        async def __aenter__(self) -> None:
            entered = self._entered
            for extension, hook, is_async in self._hooks:
                generator = hook(extension)
                if is_async:
                    try:
                        await generator.__anext__()
                    except StopAsyncIteration:
                        raise RuntimeError("generator didn't yield") from None
                else:
                    try:
                        next(generator)
                    except StopIteration:
                        raise RuntimeError("generator didn't yield") from None
                entered.append((generator, is_async))

        async def __aexit__(
            self,
            exc_type: type[BaseException] | None,
            exc_val: BaseException | None,
            exc_tb: TracebackType | None,
        ) -> None:
            entered = self._entered
            if exc_type is not None:
                await _exit_stack(entered).__aexit__(exc_type, exc_val, exc_tb)
                return
            # No error: each hook runs on, last first, and must stop (the common case,
            # with no exit stack). The first to fail hands its error to the hooks before
            # it through contextlib's own exit stack, as strawberry's stack would.
            outer = sys.exc_info()[1]
            index = len(entered)
            error: BaseException | None = None
            while index:
                index -= 1
                generator, is_async = entered[index]
                try:
                    if is_async:
                        await generator.__anext__()
                    else:
                        next(generator)
                except (StopIteration, StopAsyncIteration):
                    continue
                except BaseException as raised:
                    error = raised
                else:
                    error = await _not_stopped(generator, is_async)
                break
            if error is None:
                return
            _fix_context(error, outer)
            if await _exit_stack(list(entered)[:index]).__aexit__(
                type(error), error, error.__traceback__
            ):
                return  # an earlier hook swallowed it
            context = error.__context__
            try:
                raise error
            except BaseException:
                error.__context__ = context  # a bare raise would set the outer one
                raise

    Stage.__name__ = Stage.__qualname__ = f"Cached{base.__name__}"
    return Stage


def _factory(extension: SchemaExtension, hook: _Hook, is_async: bool) -> Callable[[], Any]:
    manager = _decorator(is_async)(hook)
    return lambda: manager(extension)


def _exit_stack(entered: Iterable[tuple[Any, bool]]) -> contextlib.AsyncExitStack:
    """contextlib's exit stack of the ``entered`` hooks, as strawberry's holds them."""
    stack = contextlib.AsyncExitStack()
    for generator, is_async in entered:
        # contextlib's own manager around the entered generator: its exit is exactly theirs.
        manager = _decorator(is_async)(lambda g=generator: g)()
        if is_async:
            stack.push_async_exit(manager.__aexit__)
        else:
            stack.push(manager.__exit__)
    return stack


async def _not_stopped(generator: Any, is_async: bool) -> BaseException:
    """What ``contextmanager`` raises when a hook yields twice: its ``RuntimeError``, or
    what closing the generator raised instead."""
    try:
        try:
            raise RuntimeError("generator didn't stop")
        finally:
            if is_async:
                await generator.aclose()
            else:
                generator.close()
    except BaseException as error:
        return error


def _fix_context(error: BaseException, outer: BaseException | None) -> None:
    """contextlib's exit stack's ``_fix_exception_context(error, None)``: a hook's error
    does not chain to the exception being handled around the stage (``outer``)."""
    while True:
        context = error.__context__
        if context is None:
            return
        if context is outer:
            error.__context__ = None
            return
        error = context


_NO_RESULTS = SchemaExtension.get_results

_Operation = _stage(OperationContextManager)
_Validation = _stage(ValidationContextManager)
_Parsing = _stage(ParsingContextManager)
_Executing = _stage(ExecutingContextManager)


class CachedHooksRunner(SchemaExtensionsRunner):
    """Strawberry's runner, with each stage's hooks found through the per-class cache.

    Streamed results (``on_stream_result``, ``@defer``/``@stream``) keep strawberry's
    own lookup: Chorus does not enable incremental delivery.
    """

    def operation(self) -> Any:
        return _Operation(self.extensions)

    def validation(self) -> Any:
        return _Validation(self.extensions)

    def parsing(self) -> Any:
        return _Parsing(self.extensions)

    def executing(self) -> Any:
        return _Executing(self.extensions)

    async def get_extensions_results(self, ctx: ExecutionContext) -> dict[str, Any]:
        """Strawberry's, asking only the extensions whose class has its own ``get_results``
        (``SchemaExtension``'s answers ``{}``; 13 calls and awaits a request, for two).
        A ``get_results`` set on an instance, not its class, is not asked."""
        data: dict[str, Any] = {}
        for extension in self.extensions:
            if type(extension).get_results is not _NO_RESULTS:
                data.update(await await_maybe(extension.get_results()))
        data.update(ctx.extensions_results)
        return data


__all__ = ["CachedHooksRunner"]
