"""The host end of the agent protocol against a scripted guest on a socketpair."""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Callable

import pytest

from vmm.errors import GuestCommandFailed, GuestCommandTimeout, VmmError
from vmm.guest.agent import INIT_SCRIPT, AgentChannel


def channel(guest: Callable[[socket.socket], None], alive: Callable[[], bool] = lambda: True):
    host, guest_end = socket.socketpair()
    threading.Thread(target=guest, args=(guest_end,), daemon=True).start()
    return AgentChannel(host.fileno(), host.fileno(), alive, host.close)


def frame(nonce: str, output: bytes, rc: int) -> bytes:
    return f"{nonce} begin\n".encode() + base64.encodebytes(output) + f"{nonce} end {rc}\n".encode()


def requests(sock: socket.socket):
    for line in sock.makefile("rb"):
        yield line.decode().split()


def test_run_ignores_noise_stale_frames_and_foreign_nonces() -> None:
    def guest(sock: socket.socket) -> None:
        for nonce, op, timeout, cmd in requests(sock):
            assert op == "run" and timeout == "5"
            assert base64.b64decode(cmd) == b"echo 'a b'\nexit 3"
            sock.sendall(
                b"[  1.0] kernel noise\r\n"
                + frame("0" * 16, b"stale", 0)
                + f"{nonce} begin\n".encode()
                + b"[  2.0] random: crng reseeded\n"
                + base64.encodebytes(b"real output\n")
                + f"{nonce} end 3\n".encode()
            )

    result = channel(guest).run("echo 'a b'\nexit 3", timeout=5)
    assert result.exit_code == 3 and result.output == "real output\n"


GARBLED_ANSWERS = {
    # the line's start was lost (a restored TCG guest under load lost its first 26 bytes): its
    # last word reads as the nonce
    "start lost": lambda nonce, cmd: frame(cmd[2:], b"forkd-agent: unknown op ''\n", 127),
    "op damaged": lambda nonce, cmd: frame(nonce, b"forkd-agent: unknown op 'rn'\n", 127),
    "base64 damaged": lambda nonce, cmd: frame(nonce, b"forkd-agent: undecodable command\n", 125),
}


@pytest.mark.parametrize("garble", list(GARBLED_ANSWERS))
def test_a_run_request_the_serial_line_garbled_is_sent_again_since_nothing_ran(garble: str) -> None:
    """Before, the host waited out the command's whole timeout for a frame that never came."""
    seen: list[list[str]] = []

    def guest(sock: socket.socket) -> None:
        for n, (nonce, op, timeout, cmd) in enumerate(requests(sock)):
            seen.append([nonce, op, timeout, cmd])
            sock.sendall(GARBLED_ANSWERS[garble](nonce, cmd) if n < 2 else frame(nonce, b"ran\n", 0))

    result = channel(guest).run("true", timeout=600)
    assert result.exit_code == 0 and result.output == "ran\n"
    assert len(seen) == 3 and len({s[0] for s in seen}) == 3  # a new nonce each time
    assert {base64.b64decode(s[3]) for s in seen} == {b"true"}


def test_a_run_garbled_every_time_fails_instead_of_waiting() -> None:
    def guest(sock: socket.socket) -> None:
        for _nonce, _op, _timeout, cmd in requests(sock):
            sock.sendall(frame(cmd[3:], b"forkd-agent: unknown op ''\n", 127))

    with pytest.raises(GuestCommandFailed, match="garbled the request 3 times"):
        channel(guest).run("true", timeout=600)


def test_a_command_that_exits_127_by_itself_is_not_sent_again() -> None:
    sent: list[str] = []

    def guest(sock: socket.socket) -> None:
        for nonce, _op, _timeout, _cmd in requests(sock):
            sent.append(nonce)
            sock.sendall(frame(nonce, b"sh: nosuch: not found\n", 127))

    result = channel(guest).run("nosuch", timeout=5)
    assert result.exit_code == 127 and len(sent) == 1


def test_hello_resends_until_the_agent_answers() -> None:
    def guest(sock: socket.socket) -> None:
        for n, (nonce, _op) in enumerate(requests(sock)):
            if n >= 2:  # the first two hellos are "lost" while the guest boots
                sock.sendall(frame(nonce, b"6.1.0-test\n", 0))

    assert channel(guest).hello(timeout=10, resend_every=0.1) == "6.1.0-test"


def test_reseed_resends_a_request_the_serial_line_lost_or_garbled() -> None:
    """A restored TCG guest under load lost one reseed line (the agent answered "unknown op ''" to
    what was left of it): reseeding is idempotent, so the host asks again with a new nonce."""
    seen: list[str] = []

    def guest(sock: socket.socket) -> None:
        for n, (nonce, op, *_rest) in enumerate(requests(sock)):
            seen.append(op)
            if n == 0:
                continue  # lost: no answer at all
            if n == 1:
                sock.sendall(frame(nonce, b"forkd-agent: unknown op ''\n", 127))  # arrived cut short
                continue
            sock.sendall(frame(nonce, b"", 0))

    result = channel(guest).reseed(b"e" * 64, timeout=10, resend_every=0.1)
    assert result.exit_code == 0 and seen == ["reseed", "reseed", "reseed"]


def test_a_reseed_nobody_answers_times_out() -> None:
    ch = channel(lambda sock: sock.makefile("rb").read())
    with pytest.raises(GuestCommandTimeout, match="reseed"):
        ch.reseed(timeout=0.3, resend_every=0.1)


def test_silence_raises_guest_command_timeout() -> None:
    ch = channel(lambda sock: sock.makefile("rb").read())
    with pytest.raises(GuestCommandTimeout):
        ch.hello(timeout=0.3, resend_every=0.1)


def test_a_dead_vm_fails_fast() -> None:
    ch = channel(lambda sock: sock.makefile("rb").read(), alive=lambda: False)
    with pytest.raises(VmmError, match="exited"):
        ch.run("true", timeout=30)


def test_a_closed_console_raises() -> None:
    def guest(sock: socket.socket) -> None:
        sock.recv(100)
        sock.close()

    with pytest.raises(VmmError, match="closed"):
        channel(guest).run("true", timeout=5)


def test_reseed_sends_the_given_entropy() -> None:
    seen: list[bytes] = []

    def guest(sock: socket.socket) -> None:
        for nonce, _op, data in requests(sock):
            seen.append(base64.b64decode(data))
            sock.sendall(frame(nonce, b"", 0))

    assert channel(guest).reseed(b"\x01" * 64).ok
    assert seen == [b"\x01" * 64]


def test_corrupt_payload_raises_guest_command_failed() -> None:
    def guest(sock: socket.socket) -> None:
        for nonce, *_ in requests(sock):
            sock.sendall(f"{nonce} begin\nabc\n{nonce} end 0\n".encode())

    with pytest.raises(GuestCommandFailed, match="corrupt"):
        channel(guest).run("true", timeout=5)


def test_init_script_speaks_the_documented_ops() -> None:
    for op in (
        "hello)",
        "run)",
        "reseed)",
        'echo "$nonce begin"',
        'echo "$nonce end $rc"',
        "timeout -s KILL",
        "/bin/forkd-reseed",
        "stty -F /dev/ttyS0 raw -echo",
    ):
        assert op in INIT_SCRIPT
