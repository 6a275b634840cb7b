"""What ``forkd-hub COMMAND --help`` says beyond one line: a description, unexplained
arguments and examples, applied to the built parser by :func:`clikit.helpdoc.document` (shared
with ``forkd``). A test walks every subcommand's ``--help``."""

from __future__ import annotations

from clikit.helpdoc import HelpTable, document

__all__ = ["HELP", "document"]

HELP: HelpTable = {
    "serve": (
        "Run the hub: HTTP API, OCI subset, forkd compatibility and OpenAPI at /schema. The first start "
        "creates the data directory, database and schema (SQLite). With --mirror-of URL: a read-only "
        "pull-through mirror of the hub at URL instead, with no database (docs/mirrors.md).",
        {},
        [
            "forkd-hub serve --data-dir /var/lib/forkd-hub",
            "FORKD_HUB_STORAGE='filesystem root=/srv/blobs' forkd-hub serve --host 0.0.0.0 --port 8080",
            "forkd-hub serve --mirror-of https://hub.example --port 5001 --mirror-cache-bytes 500G",
        ],
    ),
    "migrate": (
        "Create the hub's database schema, or upgrade it to this version's.",
        {},
        ["forkd-hub migrate --data-dir /var/lib/forkd-hub"],
    ),
    "gc": (
        "Apply the repositories' retention policies (remove the tags they expire), then delete what no tag "
        "reaches and is older than the grace period (untagged manifests, unreferenced blobs, stale uploads). "
        "The report goes to stdout; --dry-run shows what retention and the sweep would remove. --hold keeps "
        "every replica from collecting for a while (a backup); --release ends it.",
        {},
        [
            "forkd-hub gc --data-dir /var/lib/forkd-hub --dry-run",
            "forkd-hub gc --grace 0s --json",
            "forkd-hub gc --hold 2h   # before a backup; forkd-hub gc --release after it",
        ],
    ),
    "token": (
        "Create, list and revoke API tokens (hashed at rest, scoped, expiring).",
        {"token_command": "create, list or revoke"},
        ["forkd-hub token create ci --scope 'push:acme/*'", "forkd-hub token list"],
    ),
    "token create": (
        "Create a token and print it, alone, on stdout (it is shown only once).",
        {},
        [
            "forkd-hub token create ci --scope 'push:acme/*' --expires 30d",
            "forkd-hub token create reader --scope 'pull:*/*' | forkd login http://127.0.0.1:8080 --token-stdin",
        ],
    ),
    "token list": (
        "List tokens: name, prefix, scopes, dates and status (never their secrets).",
        {},
        ["forkd-hub token list", "forkd-hub token list --json"],
    ),
    "token revoke": (
        "Revoke a token by name; it is refused from then on.",
        {"name": "the token's name"},
        ["forkd-hub token revoke ci"],
    ),
    "audit": (
        "Show the audit log, newest first; --verify checks the trail of the whole deployment (the database's "
        "hash chain, every replica's events) and the local JSONL export against it, and prints the head to "
        "publish; --export FILE writes (or brings up to date) an export anywhere.",
        {},
        [
            "forkd-hub audit --action push --since 24h",
            "forkd-hub audit --verify",
            "forkd-hub audit --verify --expect-head 1042:<sha256>",
        ],
    ),
    "webhook": (
        "HTTP webhooks on push, tag move and delete, per namespace: signed, retried, logged.",
        {"webhook_command": "add, list, remove, deliveries or prune"},
        ["forkd-hub webhook add acme https://ci.example.com/hook", "forkd-hub webhook deliveries"],
    ),
    "webhook add": (
        "Call URL for the events of every repository of NAMESPACE; the signing secret is generated "
        "and printed once unless given on stdin.",
        {"namespace": "the namespace whose repositories' events are sent", "url": "where to POST them"},
        [
            "forkd-hub webhook add acme https://ci.example.com/hook --events push,tag",
            "forkd-hub webhook add acme https://ci.example.com/hook --secret-stdin < secret.txt",
        ],
    ),
    "webhook list": (
        "List webhooks: id, namespace, URL and events (never their secrets).",
        {},
        ["forkd-hub webhook list", "forkd-hub webhook list --namespace acme --json"],
    ),
    "webhook remove": (
        "Remove a webhook and its delivery log.",
        {"id": "the webhook's id (from webhook list)"},
        ["forkd-hub webhook remove 3"],
    ),
    "repo": (
        "Repositories as an operator sees them, on the hub's database: list, show, change visibility, "
        "description and README, delete a tag, and the tag policies (immutable tags, retention). Changes are "
        "audited as the API's, with the actor cli:<login user>.",
        {"repo_command": "list, show, set, delete-tag or policy"},
        [
            "forkd-hub repo list acme",
            "forkd-hub repo show acme/python-numpy",
            "forkd-hub repo policy acme/python-numpy",
        ],
    ),
    "repo list": (
        "List the hub's repositories, public and private (of one namespace): visibility, tag count, last change, "
        "the description's first line.",
        {},
        ["forkd-hub repo list", "forkd-hub repo list acme --json"],
    ),
    "repo show": (
        "Show one repository: visibility, description, README size, pull count, tag policy and its tags.",
        {"repository": "the repository, namespace/name"},
        ["forkd-hub repo show acme/python-numpy", "forkd-hub repo show acme/python-numpy --json | jq -r .readme"],
    ),
    "repo set": (
        "Change a repository's visibility, description (Markdown, up to 4,096 characters) or README (Markdown, "
        "up to 65,536 characters), all or nothing, audited like PATCH /api/v1/repositories/NS/REPO.",
        {"repository": "the repository, namespace/name"},
        [
            "forkd-hub repo set acme/python-numpy --public --description 'NumPy on Python 3.12'",
            "forkd-hub repo set acme/python-numpy --readme README.md",
            "forkd-hub repo set acme/python-numpy --private --readme - < README.md",
        ],
    ),
    "repo delete-tag": (
        "Delete one tag, as DELETE /v2/NS/REPO/manifests/TAG does (a forkd snapshot's manifest goes with its last "
        "tag; GC frees the bytes). A tag the repository's policy makes immutable needs --allow-immutable, "
        "recorded in the audit event.",
        {"reference": "the tag, namespace/name:tag"},
        ["forkd-hub repo delete-tag acme/scratch:old", "forkd-hub repo delete-tag acme/py:v1 --allow-immutable"],
    ),
    "repo policy": (
        "Show a repository's immutable-tags and retention policy, or change it (flags given). "
        "Retention is applied by 'forkd-hub gc' (and the periodic GC of serve).",
        {"repository": "the repository, namespace/name"},
        [
            "forkd-hub repo policy acme/py --immutable-tags on --immutable-exempt 'latest,dev-*'",
            "forkd-hub repo policy acme/py --keep-last 10 --retention-pattern 'nightly-*'",
            "forkd-hub repo policy acme/py --no-retention --immutable-tags default --json",
        ],
    ),
    "quota": (
        "Show a namespace's storage quota and what it uses (the bytes of the distinct blobs linked to its "
        "repositories: a shared base counts once), or change it with --set. Pushes that would pass it are "
        "refused with 403 QUOTA_EXCEEDED (docs/limits.md).",
        {"namespace": "the namespace"},
        ["forkd-hub quota acme", "forkd-hub quota acme --set 50GiB", "forkd-hub quota acme --set none --json"],
    ),
    "verify": (
        "Re-hash every stored object (blobs, recipes, pack frames) against its digest and check the "
        "database against the store (rows without objects, objects without rows). Exit 0: all verified; "
        "3: problems found; 1: could not run. --quarantine moves what is wrong to quarantine/ and marks it, "
        "never deleting.",
        {},
        [
            "forkd-hub verify --data-dir /var/lib/forkd-hub",
            "forkd-hub verify --quarantine --json",
            "forkd-hub verify --clear-marks",
        ],
    ),
    "webhook deliveries": (
        "Show the delivery log, newest first, with every attempt.",
        {},
        ["forkd-hub webhook deliveries --webhook 3 --limit 20"],
    ),
    "webhook prune": (
        "Remove finished deliveries (and their attempts) beyond the newest N per webhook or older "
        "than AGE; pending ones stay. serve prunes the same way every 10 minutes.",
        {},
        ["forkd-hub webhook prune --keep 100 --max-age 7d"],
    ),
}
