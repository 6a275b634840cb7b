"""clikit/gcpause.py: no automatic collection inside the block, and the collector left as it was found."""

from __future__ import annotations

import gc

import pytest

from clikit.gcpause import paused_collector


@pytest.fixture
def collector_state():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_enabled_again_after(collector_state):
    gc.enable()
    with paused_collector():
        assert not gc.isenabled()
        with paused_collector():  # a pause inside a pause keeps it paused when it ends
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_state):
    gc.disable()
    with paused_collector():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_exception_in_the_block_still_restores_it(collector_state):
    gc.enable()
    with pytest.raises(RuntimeError), paused_collector():
        raise RuntimeError("boom")
    assert gc.isenabled()
