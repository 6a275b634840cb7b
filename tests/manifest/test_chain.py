import pytest

from manifest.chain import resolve_chain
from manifest.errors import ChainCycle, ChainTooDeep, MissingParent


def parents(mapping):
    def parent_of(key):
        return mapping[key]

    return parent_of


def test_base_first():
    assert resolve_chain("c", parents({"a": None, "b": "a", "c": "b"})) == ["a", "b", "c"]
    assert resolve_chain("a", parents({"a": None})) == ["a"]


def test_cycle_detected():
    with pytest.raises(ChainCycle, match="loops"):
        resolve_chain("a", parents({"a": "b", "b": "a"}))
    with pytest.raises(ChainCycle):
        resolve_chain("a", parents({"a": "a"}))


def test_depth_limit():
    chain = {str(i): str(i - 1) if i else None for i in range(40)}
    assert len(resolve_chain("31", parents(chain))) == 32
    with pytest.raises(ChainTooDeep, match="32"):
        resolve_chain("32", parents(chain))
    assert len(resolve_chain("39", parents(chain), max_depth=64)) == 40


def test_missing_parent_names_the_child():
    with pytest.raises(MissingParent, match="b names parent a, which is missing"):
        resolve_chain("b", parents({"b": "a"}))
    with pytest.raises(MissingParent, match="x not found"):
        resolve_chain("x", parents({}))
