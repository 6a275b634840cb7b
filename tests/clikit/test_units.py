"""Both command lines' reports use IEC units (issue 16 leftover: gc --dry-run printed raw byte counts)."""

from clikit.units import human_size


def test_iec_sizes():
    assert human_size(512) == "512 B"
    assert human_size(1536) == "1.5 KiB"
    assert human_size(5 << 20) == "5.0 MiB"
    assert human_size(3 << 30) == "3.0 GiB"
