"""The guest agent: a busybox ``sh`` /init that runs commands sent over the serial console.

Wire protocol (one request per line, host → guest)::

    <nonce> hello                      → output: the guest's `uname -r`
    <nonce> run <timeout_s> <b64 cmd>  → runs `sh -c`-style script with stdin </dev/null
    <nonce> reseed <b64 entropy>       → RNDADDENTROPY + RNDRESEEDCRNG with the host's bytes

Every reply (guest → host) is framed by the request's nonce, a fresh random 64-bit hex value::

    <nonce> begin
    <base64 of stdout+stderr, 76-column lines>
    <nonce> end <exit status>

Command output is base64-encoded, so nothing a command prints can look like a frame line, and a
frame can only match the request that carries its nonce: replies to an earlier request that timed
out, kernel messages and tty echo are skipped. Lines inside a frame that are not pure base64 (a
stray kernel message) are dropped rather than corrupting the decode.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import select
import time
from collections.abc import Callable

from vmm.base import ExecResult, require_agent_ok
from vmm.errors import BootFailed, GuestCommandFailed, GuestCommandTimeout, VmmError
from vmm.guest.clock_helper import timespec
from vmm.processvm import ProcessVM

AGENT_VERSION = 2
# Seconds the host waits beyond a command's own timeout (the guest kills it at the timeout).
_GRACE_S = 5.0
_B64_LINE = re.compile(rb"^[A-Za-z0-9+/=]*$")
_FATAL = b"forkd-init: fatal: "  # the init could not bring the guest up (e.g. no root fs)
_UNKNOWN_OP = "forkd-agent: unknown op"  # the agent's answer to a request line that arrived garbled
_UNKNOWN_OP_RC = 127
_UNKNOWN_OP_STATUS = b"127"
_UNDECODABLE = "forkd-agent: undecodable command"  # a run whose base64 arrived damaged
_UNDECODABLE_RC = 125
_RUN_RESENDS = 2  # a garbled run request is sent again at most this many times
_SIGKILL_STATUS = 137  # what the guest shell reports for a command its timeout killed

#: The agent's request loop, shared by both ways the guest boots. The prelude before it defines
#: ``BB`` (busybox), ``F`` (the helpers' directory), ``A`` (a tmpfs work directory) and ``run_cmd``
#: (runs ``$A/cmd`` under a timeout of ``$1`` seconds).
AGENT_LOOP = r"""$BB stty -F /dev/ttyS0 raw -echo
exec 0</dev/ttyS0 1>/dev/ttyS0 2>&1
echo "forkd-agent: ready"
while true; do
  read -r nonce op a1 a2 || continue
  rc=0
  case "$op" in
    hello) $BB uname -r > $A/out ;;
    run)
      if echo "$a2" | $BB base64 -d > $A/cmd 2>/dev/null; then
        run_cmd "$a1" < /dev/null > $A/out 2>&1
        rc=$?
      else
        echo "forkd-agent: undecodable command" > $A/out; rc=125
      fi ;;
    reseed)
      echo "$a1" | $BB base64 -d > $A/seed 2>/dev/null
      $F/forkd-reseed < $A/seed > $A/out 2>&1
      rc=$?
      $BB cat $A/seed > /dev/urandom
      $BB rm -f $A/seed
      if [ -n "$a2" ]; then
        echo "$a2" | $BB base64 -d > $A/clock 2>/dev/null
        $F/forkd-clock < $A/clock >> $A/out 2>&1
        c=$?
        [ "$rc" = 0 ] && [ "$c" != 0 ] && rc=$((16 + c))
      fi ;;
    *) echo "forkd-agent: unknown op '$op'" > $A/out; rc=127 ;;
  esac
  echo "$nonce begin"
  $BB base64 $A/out
  echo "$nonce end $rc"
done
"""

#: /init of the initramfs (PID 1). It loads the drivers; with ``forkd.root=DEVICE`` on the kernel
#: command line it mounts that ext4 disk as the root filesystem, copies busybox, the helpers and
#: the agent into a tmpfs at ``/run/forkd`` of that root (so any image works, whatever it holds,
#: and nothing is written into the image but an empty ``/run`` when it had none) and hands over
#: to the agent there (``ROOTFS_AGENT``); otherwise the agent runs here, with the disk (if any)
#: mounted at /mnt as data.
INIT_SCRIPT = (
    r"""#!/bin/sh
# forkd guest init (PID 1). Protocol: vmm/guest/agent.py in forkd-hub.
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s /bin
export PATH=/bin:/sbin HOME=/root
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do
  insmod "/lib/modules/$m.ko" || echo "forkd-init: insmod $m failed"
done < /lib/modules/load-order
echo 1 > /proc/sys/kernel/printk
root=$(sed -n 's/.*forkd\.root=\([^ ]*\).*/\1/p' /proc/cmdline)
if [ -n "$root" ]; then
  mkdir -p /newroot
  mount -t ext4 -o rw "$root" /newroot || { echo "forkd-init: fatal: cannot mount the root filesystem $root as ext4"; exec sleep 2147483647; }
  [ -d /newroot/run ] || mkdir -m 0755 /newroot/run
  mount -t tmpfs -o mode=0755 tmpfs /newroot/run
  mkdir -p /newroot/run/forkd
  cp /bin/busybox /bin/forkd-reseed /bin/forkd-clock /forkd-agent /newroot/run/forkd/
  for d in dev proc sys; do
    [ -d /newroot/$d ] || mkdir -m 0555 /newroot/$d
    mount --move /$d /newroot/$d
  done
  exec switch_root /newroot /run/forkd/busybox sh /run/forkd/forkd-agent
fi
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0700 tmpfs /run
BB=/bin/busybox F=/bin A=/run/agent
mkdir -p $A /root
# A data disk, if the VMM attached one (virtio-blk probing is synchronous in insmod).
[ -b /dev/vda ] && mount /dev/vda /mnt 2>/dev/null
hostname forkd-guest
ip link set lo up 2>/dev/null
run_cmd() { ( cd / && timeout -s KILL "$1" sh $A/cmd ); }
"""
    + AGENT_LOOP
)

#: The agent on a booted root filesystem (``/run/forkd/forkd-agent``, PID 1 after switch_root).
#: Commands run with the image's own ``/bin/sh``, as root, with the environment an image records
#: (``/.forkd/env``: ``export NAME='value'`` lines, after a default PATH and HOME) in its working
#: directory (``/.forkd/workdir``), like a Dockerfile's RUN line. A virtio NIC, if attached, gets
#: QEMU user-mode networking's fixed address (10.0.2.15, gateway 10.0.2.2 = the host's loopback,
#: DNS 10.0.2.3); whether packets leave the VM is the host's choice (restricted by default).
ROOTFS_AGENT = (
    r"""BB=/run/forkd/busybox F=/run/forkd A=/run/forkd/agent
$BB mkdir -p $A /dev/pts /dev/shm
$BB mount -t devpts devpts /dev/pts 2>/dev/null
$BB mount -t tmpfs -o mode=1777 tmpfs /dev/shm 2>/dev/null
[ -d /tmp ] || $BB mkdir -m 1777 /tmp
$BB hostname forkd-guest
$BB ip link set lo up 2>/dev/null
if [ -e /sys/class/net/eth0 ]; then
  $BB ip link set eth0 up
  $BB ip addr add 10.0.2.15/24 dev eth0
  $BB ip route add default via 10.0.2.2
  if [ ! -s /etc/resolv.conf ] && [ -d /etc ]; then
    $BB rm -f /etc/resolv.conf
    echo "nameserver 10.0.2.3" > /etc/resolv.conf
  fi
fi
run_cmd() {
  if [ ! -x /bin/sh ]; then
    echo "forkd-agent: this image has no /bin/sh: --exec needs a POSIX shell in the image"
    return 126
  fi
  (
    export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
    if [ -r /.forkd/env ]; then . /.forkd/env; fi
    wd=$($BB cat /.forkd/workdir 2>/dev/null)
    cd "${wd:-/}" 2>/dev/null || cd /
    exec $BB timeout -s KILL "$1" /bin/sh $A/cmd
  )
}
"""
    + AGENT_LOOP
)


class AgentChannel:
    """Host end of the agent protocol over a console byte stream (a socket or a pipe pair).

    ``alive`` tells whether the VM process still runs, so a dead VM fails fast instead of
    waiting for a timeout. All methods raise ``VmmError`` subclasses only.
    """

    def __init__(
        self, read_fd: int, write_fd: int, alive: Callable[[], bool], on_close: Callable[[], None] = lambda: None
    ) -> None:
        self._rfd, self._wfd = read_fd, write_fd
        self._alive = alive
        self._on_close = on_close
        self._buf = b""

    def hello(self, timeout: float, resend_every: float = 1.0) -> str:
        """Wait until the agent answers; return the guest kernel release.

        The request is re-sent with a new nonce every ``resend_every`` seconds, because bytes sent
        while the guest is still booting can be dropped when its serial driver resets the FIFO.
        Raises ``GuestCommandTimeout`` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        nonces: set[str] = set()
        while True:
            nonce = self._send("hello")
            nonces.add(nonce)
            step = min(deadline, time.monotonic() + resend_every)
            reply = self._await(nonces, step, quiet_timeout=True)
            if reply is not None:
                return reply.output.strip()
            if time.monotonic() >= deadline:
                raise GuestCommandTimeout(f"guest agent did not answer within {timeout:.0f}s")

    def run(self, cmd: str, timeout: float = 30.0) -> ExecResult:
        """Run ``cmd`` in the guest (killed there after ``timeout`` s). Raises ``GuestCommandTimeout``.

        A request line the guest's serial line garbled is sent again (at most
        ``_RUN_RESENDS`` times), because then nothing ran: the agent answered "unknown op" or
        "undecodable command" for our nonce, or "unknown op" under a first word that is a piece of
        our line (its start was lost: a restored TCG guest under load lost 26 bytes of one).
        Otherwise the host would wait for the command's whole timeout for a frame that never comes.
        """
        seconds = max(1, int(timeout + 0.999))
        encoded = base64.b64encode(cmd.encode()).decode()
        for _ in range(_RUN_RESENDS + 1):
            nonce, line = self._send_line("run", str(seconds), encoded)
            reply = self._await({nonce}, time.monotonic() + seconds + _GRACE_S, garbled=line)
            assert reply is not None
            if not _refused(reply):  # _GARBLED is refused too
                return reply
        raise GuestCommandFailed(f"the guest's serial line garbled the request {_RUN_RESENDS + 1} times in a row")

    def reseed(
        self,
        entropy: bytes | None = None,
        timeout: float = 10.0,
        resend_every: float = 2.0,
        clock_ns: int | None = None,
    ) -> ExecResult:
        """Send 64 bytes of host entropy (or ``entropy``) for RNDADDENTROPY + RNDRESEEDCRNG, and
        with ``clock_ns`` (nanoseconds since the epoch) set the guest's wall clock to it
        (``forkd-clock``; an agent of version 1 ignores it). Exit status 16 + N: the reseed
        worked, the clock helper exited N.

        Reseeding is idempotent (more entropy is harmless), so a request whose bytes the guest's
        serial line lost — no answer, or the agent's "unknown op" for a line that arrived cut
        short — is re-sent with a new nonce every ``resend_every`` seconds, as ``hello`` is: a
        freshly restored TCG guest under load has been seen to lose one. Raises
        ``GuestCommandTimeout`` after ``timeout`` seconds.
        """
        data = entropy if entropy is not None else os.urandom(64)
        args = [base64.b64encode(data[:256]).decode()]
        deadline = time.monotonic() + timeout
        started = time.monotonic_ns()
        nonces: set[str] = set()
        while True:
            if clock_ns is not None:  # read per attempt: a resend carries the time it is sent at
                now = clock_ns + (time.monotonic_ns() - started) if nonces else clock_ns
                args[1:] = [base64.b64encode(timespec(now)).decode()]
            nonces.add(self._send("reseed", *args))
            reply = self._await(nonces, min(deadline, time.monotonic() + resend_every), quiet_timeout=True)
            if reply is not None and not reply.output.startswith(_UNKNOWN_OP):
                return reply
            if time.monotonic() >= deadline:
                raise GuestCommandTimeout(f"guest agent did not answer a reseed within {timeout:.0f}s")

    def close(self) -> None:
        """Close the console stream. Never raises."""
        self._on_close()

    def _send(self, op: str, *args: str) -> str:
        return self._send_line(op, *args)[0]

    def _send_line(self, op: str, *args: str) -> tuple[str, str]:
        """Send one request; its nonce and its line."""
        nonce = secrets.token_hex(8)
        line = " ".join((nonce, op, *args))
        data = line.encode() + b"\n"
        try:
            while data:
                data = data[os.write(self._wfd, data) :]
        except OSError as exc:
            raise VmmError(f"guest console write failed: {exc}") from exc
        return nonce, line

    def _await(
        self, nonces: set[str], deadline: float, quiet_timeout: bool = False, garbled: str = ""
    ) -> ExecResult | None:
        """Read lines until a frame for one of ``nonces`` ends; None on timeout if ``quiet_timeout``.
        With ``garbled`` (the request line sent), an "unknown op" frame whose nonce word is a piece
        of that line (not a nonce of ours: the line's start was lost) answers ``_GARBLED``."""
        frame_nonce: str | None = None
        payload: list[bytes] = []
        while True:
            line = self._readline(deadline)
            if line is None:
                if quiet_timeout:
                    return None
                raise GuestCommandTimeout("guest agent did not answer in time")
            if line.startswith(_FATAL):
                raise BootFailed(line.decode(errors="replace"))
            parts = line.split()
            if (
                garbled
                and len(parts) == 3
                and parts[1] == b"end"
                and parts[2] == _UNKNOWN_OP_STATUS
                and parts[0].decode(errors="replace") not in nonces
                and parts[0].decode(errors="replace") in garbled
            ):
                return _GARBLED
            if len(parts) >= 2 and parts[0].decode(errors="replace") in nonces:
                nonce, kind = parts[0].decode(), parts[1]
                if kind == b"begin":
                    frame_nonce, payload = nonce, []
                elif kind == b"end" and nonce == frame_nonce and len(parts) == 3:
                    return ExecResult(int(parts[2]), _decode(payload))
            elif frame_nonce is not None and _B64_LINE.match(line):
                payload.append(line)

    def _readline(self, deadline: float) -> bytes | None:
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self._rfd], [], [], min(remaining, 0.5))
            if not ready:
                if not self._alive():
                    raise VmmError("the VM exited while waiting for its guest agent")
                continue
            try:
                chunk = os.read(self._rfd, 65536)
            except OSError as exc:
                raise VmmError(f"guest console read failed: {exc}") from exc
            if not chunk:
                raise VmmError("the guest console closed (the VM exited?)")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.rstrip(b"\r")


#: what ``_await`` answers when the guest answered a garbled copy of the request line
_GARBLED = ExecResult(_UNKNOWN_OP_RC, _UNKNOWN_OP)


def _refused(reply: ExecResult) -> bool:
    """The agent refused the request line as it arrived (nothing ran): unknown op, undecodable."""
    return (reply.exit_code == _UNKNOWN_OP_RC and reply.output.startswith(_UNKNOWN_OP)) or (
        reply.exit_code == _UNDECODABLE_RC and reply.output.startswith(_UNDECODABLE)
    )


def _decode(lines: list[bytes]) -> str:
    try:
        return base64.b64decode(b"".join(lines)).decode(errors="replace")
    except (binascii.Error, ValueError) as exc:
        raise GuestCommandFailed(f"guest agent sent a corrupt reply: {exc}") from exc


class AgentBackedVM(ProcessVM):
    """``run`` and ``reseed`` for VMs whose guest runs the forkd agent (every driver's)."""

    @property
    def agent(self) -> AgentChannel:
        raise NotImplementedError

    def run(self, cmd: str, timeout: float = 30.0, check: bool = False) -> ExecResult:
        started = time.monotonic()
        result = self.agent.run(cmd, timeout)
        if result.exit_code == _SIGKILL_STATUS and time.monotonic() - started >= timeout - 0.5:
            raise GuestCommandTimeout(
                f"guest command timed out after {timeout:.0f}s: {cmd[:200]!r}", result.exit_code, result.output
            )
        if check and not result.ok:
            raise GuestCommandFailed(
                f"guest command exited {result.exit_code}: {cmd[:200]!r}: {result.output.strip()[-500:]}",
                result.exit_code,
                result.output,
            )
        return result

    def reseed(self, entropy: bytes | None = None, clock_ns: int | None = None) -> None:
        result = self.agent.reseed(entropy, clock_ns=clock_ns)
        if result.exit_code > 16:
            require_agent_ok(ExecResult(result.exit_code - 16, result.output), "guest clock set (forkd-clock)")
        require_agent_ok(result, "guest RNG reseed (forkd-reseed)")
