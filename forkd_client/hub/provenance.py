"""Provenance of a push: annotations read from the CI environment, and an in-toto statement.

``forkd push`` records where a snapshot was built when it runs in CI (or when the user adds
``--annotation key=value``): the annotations go on a referrer artifact of the pushed head,
never into the layer manifests, whose digests stay a pure function of the snapshot (the same
chain pushed from a laptop or from two CI runs keeps its digests). The artifact
(:mod:`.referrers`) carries these annotations and one blob: an in-toto Statement v1 whose
subject is the head manifest and whose predicate is SLSA provenance v1.

Recognised environments (the first that matches wins):

- GitHub Actions (``GITHUB_ACTIONS=true``): ``GITHUB_SHA``, ``GITHUB_SERVER_URL`` + ``GITHUB_REPOSITORY``,
  ``GITHUB_RUN_ID`` (+ ``GITHUB_RUN_ATTEMPT``), ``GITHUB_WORKFLOW``, ``RUNNER_NAME``;
- GitLab CI (``GITLAB_CI=true``): ``CI_COMMIT_SHA``, ``CI_PROJECT_URL``, ``CI_PIPELINE_URL``, ``CI_JOB_URL``,
  ``CI_JOB_NAME``, ``CI_RUNNER_DESCRIPTION``;
- any other CI (``CI=true``, or ``1``/``yes``): only ``dev.forkd.ci.system=generic``.

Keys: the OCI ones where they exist (``org.opencontainers.image.revision``, ``.source``,
``.created``), ours under ``dev.forkd.ci.`` (the prefix of every forkd annotation).

Errors: :class:`~forkd_client.errors.UsageError` for a malformed ``--annotation``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from manifest import mediatypes as mt

from ..errors import UsageError
from .referrers import Document, push_referrer
from .repository import RepositoryClient

__all__ = [
    "ARTIFACT_TYPE",
    "BUILD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "attach_provenance",
    "ci_annotations",
    "now_rfc3339",
    "parse_annotations",
    "provenance_statement",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
#: what the predicate's buildDefinition describes: a forkd push of a local chain (docs/cli.md, "Provenance")
BUILD_TYPE = "urn:forkd-hub:build-type:push:v1"
CI_PREFIX = "dev.forkd.ci."
ANNOTATION_CI_SYSTEM = CI_PREFIX + "system"
ANNOTATION_CI_REPOSITORY = CI_PREFIX + "repository"
ANNOTATION_CI_RUN_URL = CI_PREFIX + "run-url"
ANNOTATION_CI_JOB_URL = CI_PREFIX + "job-url"
ANNOTATION_CI_WORKFLOW = CI_PREFIX + "workflow"
ANNOTATION_CI_RUNNER = CI_PREFIX + "runner"
#: an OCI annotation key: reverse-domain-ish, like the OCI and our own keys
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
MAX_VALUE_BYTES = 4096
MAX_ANNOTATIONS = 64
_TRUE = ("true", "1", "yes")


def now_rfc3339() -> str:
    """The current UTC time as RFC 3339 (seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ci_annotations(env: Mapping[str, str], *, created: str | None = None) -> dict[str, str]:
    """The annotations the CI environment ``env`` describes (empty outside CI).

    ``created`` (RFC 3339, default now) becomes ``org.opencontainers.image.created`` when a CI
    is recognised. Empty variables are left out.
    """

    def get(name: str) -> str:
        return env.get(name, "").strip()

    out: dict[str, str] = {}
    if get("GITHUB_ACTIONS").lower() == "true":
        server, repository, run = (
            get("GITHUB_SERVER_URL").rstrip("/") or "https://github.com",
            get("GITHUB_REPOSITORY"),
            get("GITHUB_RUN_ID"),
        )
        out[ANNOTATION_CI_SYSTEM] = "github-actions"
        out[mt.ANNOTATION_REVISION] = get("GITHUB_SHA")
        out[ANNOTATION_CI_REPOSITORY] = repository
        if repository:
            out[mt.ANNOTATION_SOURCE] = f"{server}/{repository}"
            if run:
                attempt = get("GITHUB_RUN_ATTEMPT")
                out[ANNOTATION_CI_RUN_URL] = f"{server}/{repository}/actions/runs/{run}" + (
                    f"/attempts/{attempt}" if attempt else ""
                )
        out[ANNOTATION_CI_WORKFLOW] = get("GITHUB_WORKFLOW")
        out[ANNOTATION_CI_RUNNER] = get("RUNNER_NAME")
    elif get("GITLAB_CI").lower() == "true":
        out[ANNOTATION_CI_SYSTEM] = "gitlab-ci"
        out[mt.ANNOTATION_REVISION] = get("CI_COMMIT_SHA")
        out[mt.ANNOTATION_SOURCE] = get("CI_PROJECT_URL")
        out[ANNOTATION_CI_REPOSITORY] = get("CI_PROJECT_PATH")
        out[ANNOTATION_CI_RUN_URL] = get("CI_PIPELINE_URL")
        out[ANNOTATION_CI_JOB_URL] = get("CI_JOB_URL")
        out[ANNOTATION_CI_WORKFLOW] = get("CI_JOB_NAME")
        out[ANNOTATION_CI_RUNNER] = get("CI_RUNNER_DESCRIPTION")
    elif get("CI").lower() in _TRUE:
        out[ANNOTATION_CI_SYSTEM] = "generic"
    else:
        return {}
    out[mt.ANNOTATION_CREATED] = created or now_rfc3339()
    return {k: v for k, v in out.items() if v}


def parse_annotations(pairs: Iterable[str]) -> dict[str, str]:
    """``--annotation key=value`` arguments as a dict (a later key wins).

    Raises: UsageError naming the argument: no ``=``, a key outside ``[A-Za-z0-9][A-Za-z0-9._/-]{0,127}``,
    a value over 4096 bytes or with control characters, more than 64 annotations.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(
                f"--annotation {pair!r}: expected KEY=VALUE, e.g. "
                f"--annotation org.opencontainers.image.revision=$GIT_SHA"
            )
        if not _KEY.fullmatch(key):
            raise UsageError(
                f"--annotation {pair!r}: the key {key!r} must be 1-128 letters, digits and ._/- "
                "starting with a letter or digit (e.g. org.example.team)"
            )
        if len(value.encode()) > MAX_VALUE_BYTES:
            raise UsageError(f"--annotation {key}: the value is {len(value.encode())} bytes, over {MAX_VALUE_BYTES}")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise UsageError(f"--annotation {key}: the value holds a control character (newline, tab …)")
        out[key] = value
    if len(out) > MAX_ANNOTATIONS:
        raise UsageError(f"--annotation: {len(out)} annotations, at most {MAX_ANNOTATIONS}")
    return out


def provenance_statement(
    *,
    subject_name: str,
    subject_digest: str,
    chain: list[str],
    annotations: Mapping[str, str],
    user_annotations: Mapping[str, str],
    started: str,
    finished: str,
    forkd_version: str,
    sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An in-toto Statement v1 with an SLSA provenance v1 predicate for a pushed head.

    ``subject_digest`` is the head manifest's ``algorithm:hex``; ``chain`` the layer digests base
    → head (the ancestors become resolved dependencies); ``annotations`` what the CI environment
    said (:func:`ci_annotations`), ``user_annotations`` the ``--annotation`` ones; ``sources`` what
    the chain's base was baked from (``forkd from-image`` / ``from-debian`` annotations,
    :mod:`forkd_client.images.provenance`): the image, or each Debian package as a ``pkg:deb`` purl,
    becomes a resolved dependency too.
    """
    algorithm, _, hexdigest = subject_digest.partition(":")
    dependencies: list[dict[str, Any]] = []
    revision, source = annotations.get(mt.ANNOTATION_REVISION), annotations.get(mt.ANNOTATION_SOURCE)
    if source and revision:
        dependencies.append({"uri": f"git+{source}", "digest": {"gitCommit": revision}})
    dependencies += source_dependencies(sources or {})
    for parent in chain[:-1]:
        p_alg, _, p_hex = parent.partition(":")
        dependencies.append({"name": "parent layer", "digest": {p_alg: p_hex}})
    system = annotations.get(ANNOTATION_CI_SYSTEM)
    run_url = annotations.get(ANNOTATION_CI_RUN_URL) or annotations.get(ANNOTATION_CI_JOB_URL)
    builder = {"id": f"urn:forkd-hub:builder:{system or 'local'}", "version": {"forkd": forkd_version}}
    metadata: dict[str, Any] = {"startedOn": started, "finishedOn": finished}
    if run_url:
        metadata["invocationId"] = run_url
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name, "digest": {algorithm: hexdigest}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"reference": subject_name, "annotations": dict(user_annotations)},
                "internalParameters": {"ci": {k: v for k, v in annotations.items() if k.startswith(CI_PREFIX)}},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {"builder": builder, "metadata": metadata},
        },
    }


def source_dependencies(sources: Mapping[str, str]) -> list[dict[str, Any]]:
    """SLSA resolved dependencies for what a base was baked from: the OCI image (its name and manifest
    digest), or every requested Debian package with its installed version as a purl."""
    from ..images import provenance as src

    if digest := sources.get(src.BASE_DIGEST):
        d_alg, _, d_hex = digest.partition(":")
        return [{"name": "base image", "uri": sources.get(src.BASE_NAME, ""), "digest": {d_alg: d_hex}}]
    suite = sources.get(src.DEBIAN_SUITE)
    if not suite:
        return []
    packages = [p.split("=", 1) for p in sources.get(src.DEBIAN_PACKAGES, "").split(",") if "=" in p]
    return [
        {"name": "debian package", "uri": f"pkg:deb/debian/{name}@{quote(version, safe='')}?arch=amd64&distro={suite}"}
        for name, version in packages
    ]


#: the artifact type (and document media type) of a provenance referrer
ARTIFACT_TYPE = "application/vnd.in-toto+json"
ANNOTATION_PREDICATE_TYPE = "in-toto.io/predicate-type"


def attach_provenance(
    repo: RepositoryClient,
    tag: str,
    chain: list[str],
    *,
    annotations: Mapping[str, str],
    user_annotations: Mapping[str, str],
    started: str,
    forkd_version: str,
    sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Push the provenance of the head ``chain[-1]`` of ``repo`` as its referrer; return what the
    push summary shows: ``{"digest", "artifactType", "annotations"}``.

    The referrer's annotations are the base's source (``sources``: the image or Debian userland it was
    baked from), the CI ones, then the ``--annotation`` ones (which win), plus
    ``org.opencontainers.image.created`` and ``in-toto.io/predicate-type``. Raises HubError family.
    """
    head = chain[-1]
    manifest, _ = repo.get_manifest(head)
    finished = now_rfc3339()
    merged = {**(sources or {}), **annotations, **user_annotations}
    merged.setdefault(mt.ANNOTATION_CREATED, finished)
    merged[ANNOTATION_PREDICATE_TYPE] = PREDICATE_TYPE
    statement = provenance_statement(
        subject_name=f"{urlsplit(repo.hub.base_url).netloc}/{repo.name}:{tag}",
        subject_digest=head,
        chain=chain,
        annotations=annotations,
        user_annotations=user_annotations,
        started=started,
        finished=finished,
        forkd_version=forkd_version,
        sources=sources,
    )
    document = Document(ARTIFACT_TYPE, json.dumps(statement, indent=2, sort_keys=True).encode())
    digest = push_referrer(
        repo,
        subject_digest=head,
        subject_size=len(manifest),
        artifact_type=ARTIFACT_TYPE,
        documents=[document],
        annotations=merged,
    )
    return {"digest": digest, "artifactType": ARTIFACT_TYPE, "annotations": dict(sorted(merged.items()))}
