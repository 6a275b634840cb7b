"""The exit codes of ``forkd``: one per class of failure, so a CI script can branch on them.

    0    success
    1    any other error the user can act on (snapshot not found, bad pack, disk full, a hub error
         none of the classes below covers, an internal error)
    2    usage: a malformed argument or option (argparse's own errors, a bad reference, tag or
         ``--annotation``)
    3    auth: the hub refused the token (401: missing, wrong or expired; 403: outside its scope, or a
         namespace whose signature policy refuses an unsigned push)
    4    conflict: the state moved under the command (409: a tag moved by another push or immutable,
         dependents exist; locally: the tag exists, others chain on it)
    5    network: no answer from the hub (refused, DNS, timeout), a 502/503/504 (a gateway in front of it,
         or the hub's database or store out), or an upload session still busy after the retries
         (``UploadBusy``); retrying later may help
    6    verification: content does not match its digest, a parent changed under its child, a
         signature does not verify (any :class:`~forkd_client.errors.VerificationFailed`)
    130  interrupted (Ctrl-C); ``push`` and ``pull`` say what is kept

docs/cli.md ("Exit codes") shows the same table; tests/forkd_client/test_exitcodes.py and
tests/e2e/test_ci_push.py check that each class really exits with its code.
"""

from __future__ import annotations

from manifest.errors import DigestMismatch

from .errors import DependentsExist, InvalidTag, SnapshotExists, UsageError, VerificationFailed
from .hub.errors import (
    GATEWAY_STATUSES,
    Forbidden,
    HubError,
    HubUnreachable,
    InvalidReference,
    Unauthorized,
    UploadBusy,
)
from .images.errors import RegistryAuthFailed, RegistryUnreachable

__all__ = [
    "EXIT_AUTH",
    "EXIT_CONFLICT",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NETWORK",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXIT_VERIFICATION",
    "exit_code_for",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_CONFLICT = 4
EXIT_NETWORK = 5
EXIT_VERIFICATION = 6
EXIT_INTERRUPTED = 130


def exit_code_for(error: BaseException) -> int:
    """The exit code for ``error`` (see the module docstring); EXIT_ERROR for anything unclassified."""
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, InvalidReference | InvalidTag | UsageError):
        return EXIT_USAGE
    if isinstance(error, Unauthorized | Forbidden):
        return EXIT_AUTH
    if isinstance(error, VerificationFailed | DigestMismatch):
        return EXIT_VERIFICATION
    if isinstance(error, HubUnreachable | RegistryUnreachable | UploadBusy):
        return EXIT_NETWORK
    if isinstance(error, RegistryAuthFailed):
        return EXIT_AUTH
    if isinstance(error, SnapshotExists | DependentsExist):
        return EXIT_CONFLICT
    if isinstance(error, HubError):
        if error.status == 403:  # e.g. SIGNATURE_REQUIRED: the hub's policy refuses what this push may do
            return EXIT_AUTH
        if error.status == 409:
            return EXIT_CONFLICT
        if error.status in GATEWAY_STATUSES:
            return EXIT_NETWORK
    return EXIT_ERROR
