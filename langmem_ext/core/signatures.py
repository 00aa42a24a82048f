"""One parameter list for an entry point and its twins (``apply``/``aapply``/``view``/``aview``).

A public call and its async or read-only twins take the same parameters. They are written once,
on the first of them, and each twin takes them with :func:`same_parameters`:

.. code-block:: python

    class Strategy:
        def apply(self, messages: Sequence[BaseMessage], state: StateLike = None) -> MemoryResult:
            ...

        @same_parameters(apply)
        async def aapply(self, *args: Any, **kwargs: Any) -> MemoryResult:
            _, messages, state = bind(Strategy.apply, (self, *args), kwargs, "aapply")
            ...

Type checkers see the twin with the declared parameters (a ``ParamSpec``), so a wrong argument
is a type error; ``help()``, IDEs and :func:`inspect.signature` show them too (the twin's
``__signature__``). :func:`bind` checks a call at run time exactly as Python would and names the
twin in its error.

Pure: :mod:`inspect` only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["bind", "same_parameters"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def same_parameters(
    declared: Callable[_P, Any],
) -> Callable[[Callable[..., _T]], Callable[_P, _T]]:
    """Decorate a twin of ``declared`` (a function, or a method in the same class body: then
    ``self`` is among the parameters) that takes ``declared``'s parameters; see the module
    docstring. The twin's own return annotation is kept."""
    parameters = list(_signature(declared).parameters.values())

    def adopt(twin: Callable[..., _T]) -> Callable[_P, _T]:
        own = inspect.signature(twin)
        twin.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        return twin

    return adopt


def bind(declared: Callable[..., Any], args: Any, kwargs: Any, name: str) -> tuple[Any, ...]:
    """``args`` and ``kwargs`` bound to ``declared``'s parameters, defaults filled in, as one
    value per parameter in declared order; a call Python would refuse raises ``TypeError``
    naming ``name``."""
    signature = _signature(declared)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"{name}(): {error}") from None
    bound.apply_defaults()
    return tuple(bound.arguments.values())


_signatures: dict[Callable[..., Any], inspect.Signature] = {}


def _signature(declared: Callable[..., Any]) -> inspect.Signature:
    signature = _signatures.get(declared)
    if signature is None:
        signature = _signatures[declared] = inspect.signature(declared)
    return signature
