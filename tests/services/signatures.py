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


def _parsed_signature(cls: type[ParsedSignature], fn: AnyCallable, signature_namespace: dict[str, Any]) -> Any:
    """``ParsedSignature.from_fn``, parsed once per process for each function and namespace.

    Litestar parses every handler's and dependency's signature (``typing.get_type_hints``, an ``eval`` of each
    annotation) each time an app is built: a third of ``create_app``'s ~0.15 s, paid by every in-process hub
    the tests start. For a function defined once (at module or class level, no closure) the result depends
    only on the function and on the objects the namespace maps names to (a controller's handler is a method
    bound to a new controller instance each time: its function is the same, and a bound method's signature
    leaves out its first parameter whatever the instance), so the first answer is reused. Closures (the
    ``OPTIONS`` and OpenAPI handlers Litestar makes for each app) are parsed each time: a new function for
    each app, which a cache would keep alive with its app. The entry keeps a copy of the namespace, so the
    ``id`` of a value in its key cannot be reused for another object.
    """
    target = getattr(fn, "__func__", fn)
    if not isinstance(target, types.FunctionType) or target.__closure__ is not None:
        return _parse_signature(cls, fn, signature_namespace)
    key = (cls, target, target is not fn, tuple((name, id(value)) for name, value in signature_namespace.items()))
    entry = _PARSED_SIGNATURES.get(key)
    if entry is None:
        entry = _PARSED_SIGNATURES[key] = (_parse_signature(cls, fn, signature_namespace), dict(signature_namespace))
    return entry[0]


def install() -> None:
    """Make ``ParsedSignature.from_fn`` reuse its answers for the rest of the process."""
    ParsedSignature.from_fn = classmethod(_parsed_signature)  # type: ignore[method-assign, assignment]
