#!/usr/bin/env bash
# ci-publish.sh: bake a base snapshot of a real userland, add a link with snapshot-diff, sign both and push
# them to a hub. Works in any CI (and by hand); docs/ci-publishing.md explains every step and the GitHub
# Actions version.
#
# Required environment:
#   FORKD_HUB_URL        the hub, e.g. https://hub.example.com
#   FORKD_TOKEN          a robot token: forkd-hub token create ci-team --scope 'push:team/*' --expires 90d
#   FORKD_SIGNING_KEY    path to the Ed25519 private key (forkd keygen), or instead
#   FORKD_SIGNING_KEY_PEM  the key's PEM text (a CI secret); written to a 0600 temp file, removed at exit
#   REPO                 namespace/repo to publish to, e.g. team/python
#   LINK_EXEC            command run on the base for the link, e.g. 'pip install --break-system-packages numpy'
# The base (one of; checked in this order):
#   BASE_IMAGE           an OCI image to bake it from (forkd from-image), e.g. registry.example.com/python:3.12-slim
#   BASE_PACKAGES        Debian packages to bake it from (forkd from-debian), e.g. python3,python3-pip
#                        (BASE_SUITE: the Debian suite, default bookworm)
#   neither              the built-in busybox test guest (forkd snapshot): no python, for trying the pipeline
# Optional:
#   BASE_EXEC            command run in the base before it is snapshotted, e.g. 'python3 -V'
#   LINK_NET             1: the link's command gets the network (forkd snapshot-diff --net), e.g. to pip install
#   TAG                  tag of the link (default: the commit's short SHA from GITHUB_SHA/CI_COMMIT_SHA, else latest)
#   BASE_TAG             tag of the base on the hub (default: base)
#   MEM_MIB              guest memory of the base (default 512)
#   FORKD_HOME           local store (cache it between runs to skip re-baking an unchanged base)
#   FORKD_PUSH_ARGS      extra arguments for both pushes (e.g. --annotation k=v)
#   PUSH_SUMMARY         keep the link push's --json summary (digest, signature, bytes sent, links) in this file
#
# Prints the pushed link as REPO@DIGEST on the last line. Exit status: 0 published; 2 a variable is missing;
# otherwise that of the failing forkd command (its message on stderr says what was wrong: 3 the token was
# refused, 5 the hub unreachable, 6 a verification failed; docs/cli.md "Exit codes").
set -euo pipefail

die() { echo "ci-publish: $*" >&2; exit 2; }
[ -n "${FORKD_HUB_URL:-}" ] || die "set FORKD_HUB_URL"
[ -n "${FORKD_TOKEN:-}" ] || die "set FORKD_TOKEN (a robot token scoped push:NAMESPACE/*)"
[ -n "${REPO:-}" ] || die "set REPO (namespace/repo)"
[ -n "${LINK_EXEC:-}" ] || die "set LINK_EXEC"
sha="${GITHUB_SHA:-${CI_COMMIT_SHA:-}}"
TAG="${TAG:-${sha:+${sha:0:12}}}"
TAG="${TAG:-latest}"
BASE_TAG="${BASE_TAG:-base}"
MEM_MIB="${MEM_MIB:-512}"
BASE_SUITE="${BASE_SUITE:-bookworm}"
FORKD="${FORKD:-forkd}"
# shellcheck disable=SC2206  # word splitting of the extra arguments is intended
extra=(${FORKD_PUSH_ARGS:-})

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
key="${FORKD_SIGNING_KEY:-}"
if [ -z "$key" ]; then
  [ -n "${FORKD_SIGNING_KEY_PEM:-}" ] || die "set FORKD_SIGNING_KEY (a path) or FORKD_SIGNING_KEY_PEM (the key)"
  (umask 077 && printf '%s\n' "$FORKD_SIGNING_KEY_PEM" > "$work/signing.key")
  key="$work/signing.key"
fi

name="${REPO##*/}"
# the local base's tag names its inputs, so a cached store never reuses a base baked from other ones
inputs="${BASE_IMAGE:-}|${BASE_PACKAGES:-}|$BASE_SUITE|${BASE_EXEC:-}|$MEM_MIB"
local_base="$name-$BASE_TAG-$(printf '%s' "$inputs" | sha256sum | cut -c1-12)"
local_link="$name-$TAG"
base_exec=()
[ -z "${BASE_EXEC:-}" ] || base_exec=(--exec "$BASE_EXEC")
link_net=()
[ "${LINK_NET:-}" != 1 ] || link_net=(--net)

# 1. the base: baked once, reused while the cached store still holds it
if "$FORKD" inspect "$local_base" >/dev/null 2>&1; then
  echo "ci-publish: reusing the cached base $local_base" >&2
elif [ -n "${BASE_IMAGE:-}" ]; then
  "$FORKD" from-image "$BASE_IMAGE" --tag "$local_base" --mem-mib "$MEM_MIB" "${base_exec[@]}" >&2
elif [ -n "${BASE_PACKAGES:-}" ]; then
  "$FORKD" from-debian --suite "$BASE_SUITE" --include "$BASE_PACKAGES" --tag "$local_base" --mem-mib "$MEM_MIB" \
    "${base_exec[@]}" >&2
else
  "$FORKD" snapshot --tag "$local_base" --mem-mib "$MEM_MIB" "${base_exec[@]}" >&2
fi

# 2. the link: rebuilt every run (a nightly rebuild changes a little; only changed chunks travel)
"$FORKD" rmi "$local_link" >/dev/null 2>&1 || true
"$FORKD" snapshot-diff --from "$local_base" --tag "$local_link" "${link_net[@]}" --exec "$LINK_EXEC" >&2

# 3. sign and push: each head is signed before its tag moves (a hub may require it for the namespace)
"$FORKD" push "$local_base" "$REPO:$BASE_TAG" --sign "$key" "${extra[@]}" >&2
summary="${PUSH_SUMMARY:-$work/push.json}"
"$FORKD" push "$local_link" "$REPO:$TAG" --sign "$key" --json "${extra[@]}" > "$summary"
digest="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["digest"])' "$summary")"
echo "$REPO@$digest"
