"""The Kubernetes scheduler extender (registry/fleet/kube.py) through the app, with the JSON kube-scheduler sends.

The fixtures follow ``k8s.io/kube-scheduler/extender/v1`` (types.go): ``ExtenderArgs{Pod *v1.Pod; Nodes
*v1.NodeList; NodeNames *[]string}``, ``ExtenderFilterResult{Nodes; NodeNames; FailedNodes;
FailedAndUnresolvableNodes; Error}`` and ``HostPriorityList []HostPriority{Host string; Score int64}``. Those
structs carry no JSON tags, so Go's encoding/json writes the field names as keys; ``Pod`` and ``Node`` are
``k8s.io/api/core/v1`` objects (tagged: ``metadata``, ``annotations``, ``items``). A ``nodeCacheCapable``
extender gets ``NodeNames`` (and ``Nodes`` null), else ``Nodes`` (and ``NodeNames`` null).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hub_server.registry.fleet.kube import MAX_PRIORITY, score
from tests.hub_server.conftest import Hub, hub_on_template, stopped_hub_with
from tests.hub_server.pushing import auth, chain_images, expect_error
from tests.hub_server.registry.fleet.test_inventory import QEMU, full, report

POD: dict[str, Any] = {
    "metadata": {
        "name": "sandbox-7",
        "namespace": "default",
        "uid": "0f6e1d5c-0000-4000-8000-000000000007",
        "labels": {"app": "sandbox"},
        "annotations": {"forkd.dev/snapshot": "acme/py:head"},
    },
    "spec": {
        "containers": [{"name": "runner", "image": "registry.example/runner:1", "resources": {}}],
        "schedulerName": "default-scheduler",
    },
    "status": {"phase": "Pending"},
}


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64"}},
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {"capacity": {"cpu": "2", "memory": "24Gi"}, "allocatable": {"cpu": "2", "memory": "23Gi"}},
    }


def by_names(names: list[str], pod: dict[str, Any] = POD) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def by_nodes(names: list[str], pod: dict[str, Any] = POD) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": [node(n) for n in names]}, "NodeNames": None}


def _push_py(hub: Hub, work: Path) -> list[str]:
    """acme/py:head (3 links, compat vmm qemu-microvm): its layers' digests, base first."""
    (work / "images").mkdir()
    pusher = hub.pusher(hub.token("admin", "admin"))
    return [x.digest for x in pusher.push_chain("acme/py", chain_images(work / "images"), work / "py", "head")]


@pytest.fixture(scope="session")
def kube_template(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> tuple[Path, list[str]]:
    """acme/py pushed once per session on SQLite (each test's hub starts on a copy). The host reports are not
    in it: they expire (``FORKD_HUB_NODE_TTL``), so :func:`kube` sends them to each test's hub."""
    return stopped_hub_with(tmp_path_factory.mktemp("kube-template"), sqlite_template, _push_py)


@pytest.fixture
def hub(make_hub: Callable[..., Hub], request: pytest.FixtureRequest) -> Hub:
    return hub_on_template(request, make_hub, "kube", "kube_template")


@pytest.fixture
def kube(hub: Hub, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """acme/py:head (3 links, compat vmm qemu-microvm); h1 holds it all, h2 the base, h3 nothing, h4 is a
    Firecracker-only host; h5 never reported. Returns the token the scheduler uses (a node token).
    acme/py is copied from the session's template on SQLite, pushed here otherwise; the reports are fresh."""
    py = request.getfixturevalue("kube_template")[1] if hub.template is not None else _push_py(hub, tmp_path)
    firecracker = {**QEMU, "vmm": "firecracker", "machine": "fc", "accel": "kvm"}
    for host, layers, vmms in (
        ("h1", py, [QEMU]),
        ("h2", py[:1], [QEMU]),
        ("h3", [], [QEMU]),
        ("h4", py, [firecracker]),
    ):
        body = full(layers)
        body["facts"]["vmms"] = vmms
        assert report(hub, host, hub.token(host, "node:acme/*"), body).status_code == 200
    return hub.token("kube-scheduler", "node:acme/*")


def post(hub: Hub, verb: str, body: Any, headers: dict[str, str]):
    return hub.client.post(f"/api/v1/placement/kubernetes/{verb}", json=body, headers=headers)


def basic(token: str) -> dict[str, str]:
    """What Go's http.Client sends for a urlPrefix with user info (``https://scheduler:TOKEN@hub/…``)."""
    return {"Authorization": "Basic " + base64.b64encode(f"scheduler:{token}".encode()).decode()}


def test_filter_by_names_fails_the_nodes_that_cannot_restore_and_passes_the_rest(hub: Hub, kube):
    answer = post(hub, "filter", by_names(["h1", "h2", "h3", "h4", "h5"]), basic(kube))
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert set(result) == {"NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["NodeNames"] == ["h1", "h2", "h3", "h5"]  # h5 never reported: it can still pull
    assert result["FailedNodes"] == {}
    assert list(result["FailedAndUnresolvableNodes"]) == ["h4"]
    assert result["FailedAndUnresolvableNodes"]["h4"].startswith(
        "forkd: cannot restore it (vmm: snapshot 'qemu-microvm', host 'firecracker'"
    )
    assert result["Error"] == ""


def test_filter_by_nodes_echoes_the_node_objects(hub: Hub, kube):
    args = by_nodes(["h4", "h1"])
    result = post(hub, "filter", args, basic(kube)).json()
    assert set(result) == {"Nodes", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["Nodes"] == {"items": [node("h1")]}


def test_prioritize_scores_by_missing_bytes(hub: Hub, kube):
    result = post(hub, "prioritize", by_names(["h3", "h1", "h2", "h4", "h5"]), auth(kube)).json()
    scores = {item["Host"]: item["Score"] for item in result}
    assert [set(item) for item in result] == [{"Host", "Score"}] * 5
    assert [item["Host"] for item in result] == ["h3", "h1", "h2", "h4", "h5"]  # in the scheduler's order
    assert scores["h1"] == MAX_PRIORITY
    assert 0 < scores["h2"] < MAX_PRIORITY
    assert scores["h3"] == 0 and scores["h4"] == 0 and scores["h5"] == 0
    nodes = {item["Host"]: item["Score"] for item in post(hub, "prioritize", by_nodes(["h1", "h2"]), auth(kube)).json()}
    assert nodes == {"h1": scores["h1"], "h2": scores["h2"]}


def test_a_pod_without_the_annotation_passes_everywhere_with_no_preference(hub: Hub, kube):
    pod = copy.deepcopy(POD)
    del pod["metadata"]["annotations"]
    filtered = post(hub, "filter", by_names(["h1", "h4"], pod), auth(kube)).json()
    assert filtered["NodeNames"] == ["h1", "h4"] and filtered["FailedAndUnresolvableNodes"] == {}
    assert post(hub, "prioritize", by_names(["h1", "h4"], pod), auth(kube)).json() == [
        {"Host": "h1", "Score": 0},
        {"Host": "h4", "Score": 0},
    ]


def test_a_snapshot_that_cannot_be_placed_is_the_filter_error(hub: Hub, kube):
    pod = copy.deepcopy(POD)
    pod["metadata"]["annotations"]["forkd.dev/snapshot"] = "other/secret:v1"
    result = post(hub, "filter", by_names(["h1"], pod), auth(kube)).json()
    assert result["NodeNames"] == [] and "repository other/secret not found" in result["Error"]
    expect_error(post(hub, "prioritize", by_names(["h1"], pod), auth(kube)), 404, "NAME_UNKNOWN")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([], "a JSON object"),
        ({"Pod": "x", "NodeNames": []}, "'Pod' must be a Pod object"),
        ({"Pod": POD}, "give 'NodeNames' or 'Nodes'"),
        ({"Pod": POD, "NodeNames": [1]}, "list of strings"),
        ({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}, "metadata.name"),
    ],
)
def test_malformed_extender_args_are_refused(hub: Hub, kube, body, needle):
    response = post(hub, "filter", body, auth(kube))
    expect_error(response, 400, "INVALID_REQUEST")
    assert needle in response.json()["errors"][0]["message"]


def test_keys_are_matched_as_go_does_case_insensitively(hub: Hub, kube):
    result = post(hub, "filter", {"pod": POD, "nodenames": ["h1", "h4"]}, auth(kube)).json()
    assert result["NodeNames"] == ["h1"]


def test_score_bounds() -> None:
    assert score(0, 100) == MAX_PRIORITY
    assert score(1, 100) == MAX_PRIORITY - 1  # missing anything is below a host that misses nothing
    assert score(50, 100) == 5
    assert score(100, 100) == 0
