"""A minimal OCI distribution client over httpx for the conformance tests: every request is explicit."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx

from tests.e2e.oci.layout import EMPTY_JSON, OCI_CONFIG, OCI_LAYER, OCI_MANIFEST, descriptor, dumps, sha256

__all__ = ["Registry", "digest_of"]


def digest_of(data: bytes, algorithm: str = "sha256") -> str:
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


class Registry:
    """Requests against ``/v2/`` of a real hub, with ``token`` as bearer (or anonymous)."""

    def __init__(self, url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=120)

    def close(self) -> None:
        self.http.close()

    def push_blob(self, repo: str, data: bytes, algorithm: str = "sha256") -> str:
        """POST then PUT (distribution-spec "POST then PUT"); returns the digest."""
        digest = digest_of(data, algorithm)
        start = self.http.post(f"/v2/{repo}/blobs/uploads/")
        assert start.status_code == 202, start.text
        done = self.http.put(
            start.headers["Location"],
            params={"digest": digest},
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert done.status_code == 201, done.text
        return digest

    def put_manifest(self, repo: str, ref: str, body: bytes, media_type: str = OCI_MANIFEST) -> httpx.Response:
        return self.http.put(f"/v2/{repo}/manifests/{ref}", content=body, headers={"Content-Type": media_type})

    def push_image(self, repo: str, ref: str, layer: bytes = b"layer bytes", **fields: Any) -> tuple[bytes, str]:
        """Push a config, one layer and an image manifest (extra top-level ``fields``); (bytes, digest)."""
        config = dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}})
        self.push_blob(repo, config)
        self.push_blob(repo, layer)
        body = dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": descriptor(OCI_CONFIG, config),
                "layers": [descriptor(OCI_LAYER, layer)],
                **fields,
            }
        )
        r = self.put_manifest(repo, ref, body)
        assert r.status_code == 201, r.text
        return body, sha256(body)

    def push_artifact(
        self,
        repo: str,
        ref: str,
        artifact_type: str,
        subject: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> tuple[bytes, str]:
        """An artifact: the empty config (with its ``data`` field) and one layer, optionally with a subject."""
        self.push_blob(repo, b"{}")
        payload = f"payload of {artifact_type} {annotations}".encode()
        self.push_blob(repo, payload)
        manifest: dict[str, Any] = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": artifact_type,
            "config": descriptor(EMPTY_JSON, b"{}", data="e30="),
            "layers": [descriptor("application/octet-stream", payload)],
        }
        if subject is not None:
            manifest["subject"] = subject
        if annotations:
            manifest["annotations"] = annotations
        body = dumps(manifest)
        r = self.put_manifest(repo, ref, body)
        assert r.status_code == 201, r.text
        assert r.headers.get("OCI-Subject") == (subject["digest"] if subject else None)
        return body, sha256(body)


def errors(response: httpx.Response) -> list[str]:
    """The error codes of an error response (distribution-spec "Error Codes")."""
    return [e["code"] for e in json.loads(response.content)["errors"]]
