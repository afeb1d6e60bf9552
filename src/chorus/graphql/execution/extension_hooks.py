"""Strawberry's extension hooks, each wrapped once per extension class, not per request.

Strawberry's :class:`~strawberry.extensions.runner.SchemaExtensionsRunner`
finds each extension's hooks afresh on every request: for each of the four
stages (operation, parsing, validation, execution) it asks ``inspect``
what each of the schema's 13 extensions defines and wraps the method in a
new ``contextlib.contextmanager`` (``functools.update_wrapper`` and all).
On a cold read that was ~5% of the request's CPU (py-spy, ``bench/peers.py``'s
``cold`` row), for an answer that depends only on the extension's class.

:class:`CachedHooksRunner` asks once per (class, stage) and keeps the
unbound wrapper; a request binds it to its own extension instance, as
strawberry's ``types.MethodType`` does. Entering and leaving are strawberry's
own (:class:`~strawberry.extensions.context.ExtensionContextManagerBase`'s
exit stacks): the hooks run in the same order, see the same exceptions and
may suppress them as before. ``tests/unit/test_extension_hooks.py`` runs
recording extensions of every kind through both runners and compares.
"""

from __future__ import annotations

import contextlib
import inspect
from asyncio import iscoroutinefunction
from collections.abc import AsyncIterator, Callable, Iterator
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

_Wrap = Callable[[SchemaExtension], Any]
"""``extension → a context manager factory of no arguments`` (the bound hook)."""

_WRAPPERS: dict[tuple[type[SchemaExtension], str], tuple[_Wrap, bool] | None] = {}
"""(extension class, hook name) → (how to bind it, whether it is async), or None: no hook."""


def _wrapper(kind: type[SchemaExtension], name: str) -> tuple[_Wrap, bool] | None:
    """How strawberry's ``get_hook`` wraps ``kind``'s hook ``name``, made once."""
    key = (kind, name)
    try:
        return _WRAPPERS[key]
    except KeyError:
        pass
    hook_fn = getattr(kind, name)
    found: tuple[_Wrap, bool] | None
    if hook_fn is getattr(SchemaExtension, name):
        found = None
    elif inspect.isgeneratorfunction(hook_fn):
        found = (_bind(contextlib.contextmanager(hook_fn)), False)
    elif inspect.isasyncgenfunction(hook_fn):
        found = (_bind(contextlib.asynccontextmanager(hook_fn)), True)
    elif callable(hook_fn):
        found = _from_callable(hook_fn)
    else:
        raise ValueError(f"Hook {name} on {kind} must be callable, received {hook_fn!r}")
    _WRAPPERS[key] = found
    return found


def _bind(manager: Callable[[SchemaExtension], Any]) -> _Wrap:
    def bind(extension: SchemaExtension) -> Callable[[], Any]:
        return lambda: manager(extension)

    return bind


def _from_callable(func: Callable[[SchemaExtension], Any]) -> tuple[_Wrap, bool]:
    """Strawberry's ``from_callable``: a plain hook run on entering, before the stage."""
    if iscoroutinefunction(func):

        @contextlib.asynccontextmanager
        async def run_async(extension: SchemaExtension) -> AsyncIterator[None]:
            await func(extension)
            yield

        return _bind(run_async), True

    @contextlib.contextmanager
    def run(extension: SchemaExtension) -> Iterator[None]:
        func(extension)
        yield

    return _bind(run), False


def _cached(base: type[ExtensionContextManagerBase]) -> type[ExtensionContextManagerBase]:
    """``base`` (one stage's context manager) finding its hooks through :func:`_wrapper`."""

    class Cached(base):  # type: ignore[misc,valid-type]
        def __init__(self, extensions: list[SchemaExtension]) -> None:
            # Not super().__init__: it would look every hook up again.
            self.hooks = []
            name = self.HOOK_NAME
            for extension in extensions:
                found = _wrapper(type(extension), name)
                if found is not None:
                    bind, is_async = found
                    self.hooks.append(WrappedHook(extension, bind(extension), is_async))

    Cached.__name__ = Cached.__qualname__ = f"Cached{base.__name__}"
    return Cached


_Operation = _cached(OperationContextManager)
_Validation = _cached(ValidationContextManager)
_Parsing = _cached(ParsingContextManager)
_Executing = _cached(ExecutingContextManager)


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


__all__ = ["CachedHooksRunner"]
