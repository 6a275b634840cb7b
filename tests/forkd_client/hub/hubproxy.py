"""A client that talks to the in-process hub through a hook that may answer instead of it
(a hostile hub, a dropped connection)."""

from __future__ import annotations

import httpx

from forkd_client.hub.retry import Retrier

#: For a client whose connection a test cuts on purpose: it fails at once, not after a minute of retries.
NO_RETRY = Retrier(window=0)


def proxy(inproc_hub, tamper) -> httpx.Client:
    """An httpx.Client that forwards to the in-process hub; ``tamper(request)`` may answer instead."""

    def handler(request: httpx.Request) -> httpx.Response:
        answer = tamper(request)
        if answer is not None:
            return answer
        r = inproc_hub.http.request(
            request.method, request.url.raw_path.decode(), headers=dict(request.headers), content=request.content
        )
        return httpx.Response(
            r.status_code,
            headers={k: v for k, v in r.headers.items() if k.lower() not in ("content-encoding", "content-length")},
            content=r.content,
        )

    return httpx.Client(transport=httpx.MockTransport(handler), base_url="http://hub.test")
