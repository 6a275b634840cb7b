import errno

from forkd_client.cli.main import _describe_os_error


def test_disk_full_is_named_and_says_what_to_do():
    message = _describe_os_error(OSError(errno.ENOSPC, "No space left on device", "/x/memory.bin"))
    assert "disk full writing /x/memory.bin" in message and "rerun" in message


def test_other_os_errors_name_the_path():
    assert _describe_os_error(OSError(errno.EACCES, "Permission denied", "/y")) == "Permission denied: /y"
