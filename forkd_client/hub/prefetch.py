"""What a pull needs of each link before its fill, fetched up front and concurrently.

A link's chunk maps (each checked against its digest and the config, :func:`.linkcheck.fetch_maps`)
and its vmstate frame are small next to its data, but fetched link by link they cost a hub round
trip (and, with redirects, a store round trip) each while nothing else moves. :class:`LinkPrefetch`
asks for all of them at once, on a few threads, as soon as the pull knows which links it fetches:
the chunk maps of every link it needs them for (the fetched links and the reused ones below a
fetched link, whose maps give the parent's chunk lists), and the vmstates of the fetched links,
up to a byte budget (the rest are fetched at their turn). Nothing fetched here is trusted before
its check: the maps are checked as they arrive, each vmstate as it is inflated.

Errors: whatever the fetch raises (DigestInvalid, HubError, OSError) comes out of :meth:`maps` or
:meth:`vmstate` for the link it belongs to, when that link's turn comes, as if fetched then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from manifest.model import ChunkMap

from .client import HubClient
from .linkcheck import fetch_maps
from .pullstages import ParsedLink

__all__ = ["PREFETCH_THREADS", "VMSTATE_BUDGET", "LinkPrefetch"]

PREFETCH_THREADS = 4
VMSTATE_BUDGET = 128 << 20  # compressed vmstate bytes held ahead of their links' turn

#: fetch one link's vmstate frame: (repository, parsed link) -> frame bytes
VmstateFetch = Callable[[str, ParsedLink], bytes]


class LinkPrefetch:
    """Each link's chunk maps and vmstate, asked for concurrently ahead of its fill.

    ``links`` are (repository, parsed link, fetched?) base first. :meth:`maps` and :meth:`vmstate`
    return what was prefetched (waiting for it), or fetch it now when it was not; call
    :meth:`close` (idempotent) to drop what was not started yet."""

    def __init__(
        self, client: HubClient, links: Sequence[tuple[str, ParsedLink, bool]], fetch_vmstate: VmstateFetch
    ) -> None:
        self.client, self.fetch_vmstate = client, fetch_vmstate
        self._maps: dict[str, Future[dict[str, ChunkMap]]] = {}
        self._vmstates: dict[str, Future[bytes]] = {}
        fetched = [i for i, (_, _, fetch) in enumerate(links) if fetch]
        self._pool = ThreadPoolExecutor(max_workers=PREFETCH_THREADS, thread_name_prefix="forkd-prefetch")
        if not fetched:
            return
        budget = VMSTATE_BUDGET
        for name, parsed, fetch in links[: fetched[-1] + 1]:
            link, manifest, config = parsed
            self._maps[link.digest] = self._pool.submit(fetch_maps, client.repository(name), link, manifest, config)
            if fetch and manifest.vmstate.size <= budget:
                budget -= manifest.vmstate.size
                self._vmstates[link.digest] = self._pool.submit(fetch_vmstate, name, parsed)

    def maps(self, name: str, parsed: ParsedLink) -> dict[str, ChunkMap]:
        """The link's chunk maps, checked. Raises what :func:`.linkcheck.fetch_maps` raises."""
        future = self._maps.pop(parsed[0].digest, None)
        return future.result() if future is not None else fetch_maps(self.client.repository(name), *parsed)

    def vmstate(self, name: str, parsed: ParsedLink) -> bytes:
        """The link's vmstate frame (not inflated nor checked yet). Raises what the fetch raises."""
        future = self._vmstates.pop(parsed[0].digest, None)
        return future.result() if future is not None else self.fetch_vmstate(name, parsed)

    def close(self) -> None:
        """Cancel what has not started; wait for what has (its result is dropped)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._maps.clear()
        self._vmstates.clear()
