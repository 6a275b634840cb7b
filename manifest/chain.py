"""Resolve a chain of layers base-first, with cycle detection and a depth limit.

The walk is generic: callers give a ``parent_of`` function (tag → parent tag, or
manifest digest → parent digest), so the local store and the hub share it.

Errors: :class:`~manifest.errors.ChainCycle`, :class:`~manifest.errors.ChainTooDeep`,
:class:`~manifest.errors.MissingParent`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from .errors import ChainCycle, ChainTooDeep, MissingParent

DEFAULT_MAX_DEPTH = 32

K = TypeVar("K", bound=Hashable)


def resolve_chain(head: K, parent_of: Callable[[K], K | None], *, max_depth: int = DEFAULT_MAX_DEPTH) -> list[K]:
    """Return ``[base, …, head]`` by following ``parent_of`` from ``head``.

    ``parent_of(key)`` returns the parent key, None for a base, or raises
    ``KeyError``/``LookupError`` when ``key`` itself is unknown (reported as
    MissingParent naming the link that referred to it).
    """
    chain = [head]
    seen = {head}
    child = None
    key = head
    while True:
        try:
            parent = parent_of(key)
        except LookupError:
            if child is None:
                raise MissingParent(f"{key} not found") from None
            raise MissingParent(f"{child} names parent {key}, which is missing") from None
        if parent is None:
            break
        if parent in seen:
            raise ChainCycle(f"chain of {head} loops: {parent} is its own ancestor")
        if len(chain) >= max_depth:
            raise ChainTooDeep(f"chain of {head} is deeper than the limit of {max_depth} links")
        chain.append(parent)
        seen.add(parent)
        child, key = key, parent
    chain.reverse()
    return chain
