"""Litestar's handler signatures parsed once per test process (installed by ``tests/conftest.py``).

The tests build several hundred in-process hubs; Litestar parses every handler's and dependency's signature
(``typing.get_type_hints``, an ``eval`` of each annotation) each time an app is built: a third of
``create_app``'s ~0.15 s. Production builds one app per process and pays it once, so this lives with the tests,
not in ``hub_server``. Behaviour is unchanged: the hubs answer exactly as before.
"""

from __future__ import annotations

import types
from typing import Any

from litestar.types import AnyCallable
from litestar.utils.signature import ParsedSignature

_PARSED_SIGNATURES: dict[tuple[Any, ...], tuple[ParsedSignature, dict[str, Any]]] = {}
_parse_signature = ParsedSignature.from_fn.__func__  # type: ignore[attr-defined]


def _key(cls: type[ParsedSignature], fn: AnyCallable, signature_namespace: dict[str, Any]) -> tuple[Any, ...] | None:
    """What ``ParsedSignature.from_fn`` reads of ``fn`` and the namespace, as a dict key; ``None`` when some of
    it is unhashable (then the signature is parsed, as Litestar does)."""
    target = getattr(fn, "__func__", fn)
    if not isinstance(target, types.FunctionType):
        return None
    names = tuple((name, id(value)) for name, value in signature_namespace.items())
    if target.__closure__ is None:
        return (cls, target, target is not fn, names)
    key = (
        cls,
        target.__code__,
        target.__module__,
        target is not fn,
        tuple(target.__annotations__.items()),
        target.__defaults__,
        tuple(sorted((target.__kwdefaults__ or {}).items())),
        names,
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _parsed_signature(cls: type[ParsedSignature], fn: AnyCallable, signature_namespace: dict[str, Any]) -> Any:
    """``ParsedSignature.from_fn``, parsed once per process for each function and namespace.

    Litestar parses every handler's and dependency's signature (``typing.get_type_hints``, an ``eval`` of each
    annotation) each time an app is built: a third of ``create_app``'s ~0.15 s, paid by every in-process hub
    the tests start. The answer depends only on the function's parameters (names, kinds, defaults), its
    annotations, its module's globals and the objects the namespace maps names to, never on the instance a
    method is bound to (a controller's handler is bound to a new controller each time, and a bound method's
    signature leaves out its first parameter whatever the instance) nor on a closure's cells (annotations
    resolve in the module and the namespace only). So a function defined once (module or class level) is
    keyed by itself; a closure (the ``OPTIONS`` handler Litestar makes for each path of each app, ~50 an
    app; our ``provide_repository`` dependencies) by its code, annotations and defaults, so the cache keeps
    neither the function nor its app alive. The entry keeps a copy of the namespace, so the ``id`` of a
    value in its key cannot be reused for another object.
    """
    key = _key(cls, fn, signature_namespace)
    if key is None:
        return _parse_signature(cls, fn, signature_namespace)
    entry = _PARSED_SIGNATURES.get(key)
    if entry is None:
        entry = _PARSED_SIGNATURES[key] = (_parse_signature(cls, fn, signature_namespace), dict(signature_namespace))
    return entry[0]


def install() -> None:
    """Make ``ParsedSignature.from_fn`` reuse its answers for the rest of the process."""
    ParsedSignature.from_fn = classmethod(_parsed_signature)  # type: ignore[method-assign, assignment]
