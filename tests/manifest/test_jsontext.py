"""manifest.jsontext.loads: deep nesting is a JSONDecodeError, not a RecursionError."""

import json

import pytest

from manifest.jsontext import JSONTooDeep, loads


@pytest.mark.parametrize("doc", [b"[" * 100_000 + b"]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000])
def test_deep_nesting_is_a_decode_error(doc):
    with pytest.raises(json.JSONDecodeError) as info:
        loads(doc)
    assert isinstance(info.value, JSONTooDeep)
    assert str(info.value) == "JSON is nested too deeply"


def test_ordinary_documents_parse():
    assert loads(b'{"a":[1,{"b":null}]}') == {"a": [1, {"b": None}]}
    assert loads(memoryview(b"[1]")) == [1]
    with pytest.raises(json.JSONDecodeError):
        loads(b"{")
