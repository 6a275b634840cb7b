"""The traceback scan catches a traceback in a JSON log line and in plain output, and nothing else."""

import json

import pytest

from tests.e2e.logscan import assert_no_traceback


def test_a_traceback_in_a_json_log_line_is_caught():
    line = json.dumps({"level": "ERROR", "msg": "unhandled", "exc": "Traceback (most recent call last):\n  File x"})
    with pytest.raises(AssertionError, match="hub log holds a Python traceback"):
        assert_no_traceback('{"msg": "ok"}\n' + line + "\n", "hub log")


def test_plain_output_is_scanned_too():
    with pytest.raises(AssertionError):
        assert_no_traceback('Traceback (most recent call last):\n  File "x", line 1\nValueError\n', "forkd pull")
    assert_no_traceback("forkd: error: the hub refused the token\n", "forkd login")  # no traceback: fine
