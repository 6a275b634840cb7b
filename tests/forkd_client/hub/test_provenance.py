"""CI facts read from the environment, ``--annotation`` validation, and the in-toto statement,
pushed as a referrer of the head to a real (in-process) hub and read back."""

from __future__ import annotations

import json

import pytest

from forkd_client.errors import UsageError
from forkd_client.hub.provenance import (
    ARTIFACT_TYPE,
    BUILD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    attach_provenance,
    ci_annotations,
    parse_annotations,
    provenance_statement,
    source_dependencies,
)
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.hub.referrers import fetch_documents

NOW = "2026-12-01T03:00:00Z"


def test_github_actions_facts_use_oci_keys_where_they_exist():
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SHA": "abc123",
        "GITHUB_REPOSITORY": "acme/envs",
        "GITHUB_SERVER_URL": "https://ghe.example.com/",
        "GITHUB_RUN_ID": "99",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_WORKFLOW": "bake",
        "RUNNER_NAME": "r1",
        "CI": "true",
        "GITLAB_CI": "true",
    }
    assert ci_annotations(env, created=NOW) == {
        "dev.forkd.ci.system": "github-actions",
        "org.opencontainers.image.revision": "abc123",
        "org.opencontainers.image.source": "https://ghe.example.com/acme/envs",
        "dev.forkd.ci.repository": "acme/envs",
        "dev.forkd.ci.run-url": "https://ghe.example.com/acme/envs/actions/runs/99/attempts/2",
        "dev.forkd.ci.workflow": "bake",
        "dev.forkd.ci.runner": "r1",
        "org.opencontainers.image.created": NOW,
    }


def test_gitlab_generic_and_no_ci():
    gitlab = ci_annotations(
        {
            "GITLAB_CI": "true",
            "CI_COMMIT_SHA": "def",
            "CI_PROJECT_URL": "https://gl/acme/envs",
            "CI_PIPELINE_URL": "https://gl/acme/envs/-/pipelines/1",
            "CI_JOB_URL": "https://gl/j/2",
            "CI_RUNNER_DESCRIPTION": "shared",
            "CI_JOB_NAME": "",
        },
        created=NOW,
    )
    assert gitlab["dev.forkd.ci.system"] == "gitlab-ci" and gitlab["org.opencontainers.image.revision"] == "def"
    assert (
        gitlab["dev.forkd.ci.run-url"].endswith("/pipelines/1") and gitlab["dev.forkd.ci.job-url"] == "https://gl/j/2"
    )
    assert "dev.forkd.ci.workflow" not in gitlab  # empty variables are left out
    assert ci_annotations({"CI": "1"}, created=NOW) == {
        "dev.forkd.ci.system": "generic",
        "org.opencontainers.image.created": NOW,
    }
    assert ci_annotations({"CI": "false", "GITHUB_ACTIONS": "false"}) == {}
    assert ci_annotations({}) == {}


def test_annotations_are_validated_and_a_later_key_wins():
    assert parse_annotations(["a.b=1", "org.example/team=ml", "a.b=2", "empty="]) == {
        "a.b": "2",
        "org.example/team": "ml",
        "empty": "",
    }
    for bad, message in (
        ("novalue", "expected KEY=VALUE"),
        ("=v", "the key ''"),
        ("-x=1", "the key '-x'"),
        ("k=line\nbreak", "control character"),
        ("k=" + "x" * 4097, "over 4096"),
    ):
        with pytest.raises(UsageError, match=message):
            parse_annotations([bad])
    with pytest.raises(UsageError, match="at most 64"):
        parse_annotations([f"k{i}=v" for i in range(65)])


def test_the_statement_names_the_head_and_its_parents():
    statement = provenance_statement(
        subject_name="hub/acme/py:v1",
        subject_digest="sha256:" + "a" * 64,
        chain=["sha256:" + "b" * 64, "sha256:" + "a" * 64],
        annotations={
            "org.opencontainers.image.source": "https://x/acme/envs",
            "org.opencontainers.image.revision": "c0",
            "dev.forkd.ci.system": "generic",
        },
        user_annotations={"k": "v"},
        started=NOW,
        finished=NOW,
        forkd_version="1",
    )
    assert statement["_type"] == STATEMENT_TYPE and statement["predicateType"] == PREDICATE_TYPE
    assert statement["subject"] == [{"name": "hub/acme/py:v1", "digest": {"sha256": "a" * 64}}]
    build = statement["predicate"]["buildDefinition"]
    assert build["buildType"] == BUILD_TYPE and build["externalParameters"]["annotations"] == {"k": "v"}
    assert build["resolvedDependencies"] == [
        {"uri": "git+https://x/acme/envs", "digest": {"gitCommit": "c0"}},
        {"name": "parent layer", "digest": {"sha256": "b" * 64}},
    ]
    assert statement["predicate"]["runDetails"]["builder"]["id"] == "urn:forkd-hub:builder:generic"


def test_provenance_is_a_verified_referrer_of_the_head(chain3, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    client = inproc_hub.client(token)
    result = push(chain3, client, "head", Reference.parse("acme/py:v1"))
    chain = [link.digest for link in result.links]
    repo = client.repository("acme/py")
    attached = attach_provenance(
        repo,
        "v1",
        chain,
        annotations=ci_annotations({"CI": "true"}, created=NOW),
        user_annotations={"org.example.team": "ml"},
        started=NOW,
        forkd_version="1",
    )
    listed = repo.referrers(result.digest)
    assert [r["digest"] for r in listed] == [attached["digest"]]
    assert listed[0]["artifactType"] == ARTIFACT_TYPE and listed[0]["annotations"] == attached["annotations"]
    assert attached["annotations"]["org.example.team"] == "ml"
    assert attached["annotations"]["in-toto.io/predicate-type"] == PREDICATE_TYPE
    assert repo.referrers(chain[0]) == []  # attached to the head only
    [document] = fetch_documents(repo, attached["digest"])
    statement = json.loads(document.data)
    assert statement["subject"][0]["digest"] == {"sha256": result.digest.split(":")[1]}
    assert len(statement["predicate"]["buildDefinition"]["resolvedDependencies"]) == len(chain) - 1
    assert client.repository("acme/py").manifest_exists(result.digest)  # the head is untouched: same digest, same tag
    assert client.repository("acme/py").tag_digest("v1") == result.digest


def test_the_base_image_or_debian_packages_are_resolved_dependencies():
    image = {
        "org.opencontainers.image.base.name": "registry.example/library/python:3.12",
        "org.opencontainers.image.base.digest": "sha256:" + "c" * 64,
    }
    assert source_dependencies(image) == [
        {"name": "base image", "uri": "registry.example/library/python:3.12", "digest": {"sha256": "c" * 64}}
    ]
    debian = {
        "dev.forkd.debian.suite": "bookworm",
        "dev.forkd.debian.variant": "minbase",
        "dev.forkd.debian.packages": "python3=3.11.2-1+b1,python3-pip=23.0.1+dfsg-1",
    }
    assert source_dependencies(debian) == [
        {"name": "debian package", "uri": "pkg:deb/debian/python3@3.11.2-1%2Bb1?arch=amd64&distro=bookworm"},
        {"name": "debian package", "uri": "pkg:deb/debian/python3-pip@23.0.1%2Bdfsg-1?arch=amd64&distro=bookworm"},
    ]
    assert source_dependencies({}) == []
    statement = provenance_statement(
        subject_name="hub/acme/py:v1",
        subject_digest="sha256:" + "a" * 64,
        chain=["sha256:" + "a" * 64],
        annotations={},
        user_annotations={},
        started=NOW,
        finished=NOW,
        forkd_version="1",
        sources=debian,
    )
    assert statement["predicate"]["buildDefinition"]["resolvedDependencies"] == source_dependencies(debian)
