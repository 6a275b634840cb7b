import errno
from pathlib import Path

from forkd_client.cli.main import _describe_os_error
from forkd_client.diskspace import mount_point


def test_disk_full_names_the_filesystem_and_what_to_free(tmp_path: Path):
    home = tmp_path / "home"
    (home / ".staging" / "resume-x").mkdir(parents=True)
    (home / ".staging" / "resume-x" / "memory.bin").write_bytes(b"x" * 8192)
    message = _describe_os_error(OSError(errno.ENOSPC, "No space left on device", str(home / "m.bin")), home)
    assert message.startswith(
        f"no space left on {mount_point(tmp_path)} (writing {home / 'm.bin'}): free space there: "
    )
    assert "'forkd prune' removes what interrupted pulls and pushes left (8.0 KiB here)" in message
    assert "'forkd rmi TAG' removes a snapshot" in message and message.endswith("then run the command again")


def test_other_os_errors_name_the_path():
    assert _describe_os_error(OSError(errno.EACCES, "Permission denied", "/y")) == "Permission denied: /y"
