"""Issue 28: the client rides out transient failures while the hub progresses, and says what they were."""

from __future__ import annotations

import httpx
import pytest

from forkd_client.hub.errors import HubError, HubUnreachable, NotFound, UploadBusy
from forkd_client.hub.retry import Retrier, http_timeout, retry_window, transient
from forkd_client.hub.wire import error_from


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def _retrier(window: float) -> tuple[Retrier, FakeTime, list[str]]:
    t, lines = FakeTime(), []
    return Retrier(window=window, notice=lines.append, sleep=t.sleep, clock=t.clock), t, lines


def _unavailable() -> HubError:
    return HubError("the database is unavailable; retry later", code="UNAVAILABLE", status=503)


def test_transient_failures_are_gateway_answers_no_answer_and_busy_sessions():
    assert transient(_unavailable()) and transient(HubUnreachable("refused")) and transient(UploadBusy("busy"))
    assert not transient(NotFound("no such tag", status=404)) and not transient(HubError("bad", status=400))


def test_a_step_is_retried_with_backoff_until_it_works_and_each_wait_is_told():
    retrier, t, lines = _retrier(window=60)
    failures = iter([_unavailable(), _unavailable(), _unavailable()])

    def step() -> str:
        error = next(failures, None)
        if error is not None:
            raise error
        return "done"

    assert retrier.run("PUT manifest", step) == "done"
    assert t.slept == [0.5, 1.0, 2.0]
    assert lines == [f"PUT manifest: the database is unavailable; retry later; retrying in {w:.1f} s" for w in t.slept]


def test_the_window_counts_time_without_progress_and_the_last_error_is_raised():
    retrier, t, _ = _retrier(window=6)

    def step() -> None:
        raise _unavailable()

    with pytest.raises(HubError, match="unavailable"):
        retrier.run("HEAD manifest", step)
    assert sum(t.slept) <= 6 and len(t.slept) == 3  # 0.5 + 1 + 2, then 4 more would pass the window


def test_progress_restarts_the_window_and_retry_after_is_honoured():
    retrier, t, _ = _retrier(window=6)
    committed = [0]

    def step() -> str:
        if committed[0] < 10:
            committed[0] += 1  # the hub accepted more before the connection dropped
            error = HubUnreachable("reset")
            error.retry_after = 5
            raise error
        return "uploaded"

    assert retrier.run("upload", step, progress=lambda: committed[0]) == "uploaded"
    assert t.slept == [5] * 10  # 50 s in all, never 6 s without progress


def test_non_transient_errors_and_a_zero_window_are_not_retried():
    retrier, t, _ = _retrier(window=60)
    with pytest.raises(NotFound):
        retrier.run("GET", lambda: (_ for _ in ()).throw(NotFound("gone", status=404)))
    off, t_off, _ = _retrier(window=0)
    with pytest.raises(HubError):
        off.run("GET", lambda: (_ for _ in ()).throw(_unavailable()))
    assert t.slept == [] and t_off.slept == []


def test_timeouts_and_window_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("FORKD_TIMEOUT", "300")
    monkeypatch.setenv("FORKD_RETRY_FOR", "0")
    assert http_timeout() == 300 and retry_window() == 0
    monkeypatch.setenv("FORKD_TIMEOUT", "soon")
    with pytest.raises(HubError, match="FORKD_TIMEOUT='soon' is not a number of seconds"):
        http_timeout()


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_gateway_answer_without_a_body_says_what_it_means(status):
    """A HEAD has no body to carry the hub's envelope; a proxy answers its own page: the message still says."""
    error = error_from(httpx.Response(status), "HEAD", "/v2/acme/vm/manifests/v1")
    assert str(error) == (
        f"HEAD /v2/acme/vm/manifests/v1 failed with HTTP {status}: the hub, or what it depends on, is unavailable; "
        "retry later"
    )
    assert transient(error)


def test_the_hubs_own_unavailable_envelope_is_kept():
    body = {"errors": [{"code": "UNAVAILABLE", "message": "the database is unavailable; retry later"}]}
    error = error_from(httpx.Response(503, json=body), "PUT", "/v2/acme/vm/manifests/v1")
    assert str(error) == "the database is unavailable; retry later" and error.code == "UNAVAILABLE"


def test_a_request_that_timed_out_after_longer_than_the_window_is_retried_once_more():
    """A PATCH the hub is still verifying times out after FORKD_TIMEOUT (120 s, twice the 60 s window): its
    retry must still happen, and find the upload busy (progress) or done. A hub that never answers is left
    after the second timeout."""
    retrier, t, lines = _retrier(window=60)
    answers = iter(["timeout", "busy", "done"])

    def step() -> str:
        answer = next(answers)
        if answer == "timeout":
            t.now += 120
            raise HubUnreachable("hub timed out on PATCH")
        if answer == "busy":
            raise UploadBusy("upload is busy")
        return answer

    assert retrier.run("upload", step, progress=lambda: 0) == "done"
    assert len(lines) == 2

    silent, t2, _ = _retrier(window=60)
    attempts = []

    def hangs() -> None:
        attempts.append(t2.now)
        t2.now += 120
        raise HubUnreachable("hub timed out on PATCH")

    with pytest.raises(HubUnreachable):
        silent.run("upload", hangs)
    assert len(attempts) == 2
