"""What ``forkd-hub COMMAND --help`` says beyond one line: a description, unexplained
arguments and examples, applied to the built parser by :func:`clikit.helpdoc.document` (shared
with ``forkd``). A test walks every subcommand's ``--help``."""

from __future__ import annotations

from clikit.helpdoc import HelpTable, document

__all__ = ["HELP", "document"]

HELP: HelpTable = {
    "serve": ("Run the hub: HTTP API, OCI subset, forkd compatibility and OpenAPI at /schema. The first start "
              "creates the data directory, database and schema (SQLite).", {},
              ["forkd-hub serve --data-dir /var/lib/forkd-hub",
               "FORKD_HUB_STORAGE='filesystem root=/srv/blobs' forkd-hub serve --host 0.0.0.0 --port 8080"]),
    "migrate": ("Create the hub's database schema, or upgrade it to this version's.", {},
                ["forkd-hub migrate --data-dir /var/lib/forkd-hub"]),
    "gc": ("Delete what no tag reaches and is older than the grace period (untagged manifests, unreferenced "
           "blobs, stale uploads). The report goes to stdout.", {},
           ["forkd-hub gc --data-dir /var/lib/forkd-hub --dry-run", "forkd-hub gc --grace 0s --json"]),
    "token": ("Create, list and revoke API tokens (hashed at rest, scoped, expiring).",
              {"token_command": "create, list or revoke"},
              ["forkd-hub token create ci --scope 'push:acme/*'", "forkd-hub token list"]),
    "token create": ("Create a token and print it, alone, on stdout (it is shown only once).", {},
                     ["forkd-hub token create ci --scope 'push:acme/*' --expires 30d",
                      "forkd-hub token create reader --scope 'pull:*/*' | forkd login http://127.0.0.1:8080 --token-stdin"]),
    "token list": ("List tokens: name, prefix, scopes, dates and status (never their secrets).", {},
                   ["forkd-hub token list", "forkd-hub token list --json"]),
    "token revoke": ("Revoke a token by name; it is refused from then on.", {"name": "the token's name"},
                     ["forkd-hub token revoke ci"]),
    "audit": ("Show the audit log, newest first; --verify checks the JSONL export against its hash chain and the "
              "database and prints its head to publish.", {},
              ["forkd-hub audit --action push --since 24h", "forkd-hub audit --verify",
               "forkd-hub audit --verify --expect-head 1042:<sha256>"]),
    "webhook": ("HTTP webhooks on push, tag move and delete, per namespace: signed, retried, logged.",
                {"webhook_command": "add, list, remove or deliveries"},
                ["forkd-hub webhook add acme https://ci.example.com/hook", "forkd-hub webhook deliveries"]),
    "webhook add": ("Call URL for the events of every repository of NAMESPACE; the signing secret is generated "
                    "and printed once unless given on stdin.",
                    {"namespace": "the namespace whose repositories' events are sent", "url": "where to POST them"},
                    ["forkd-hub webhook add acme https://ci.example.com/hook --events push,tag",
                     "forkd-hub webhook add acme https://ci.example.com/hook --secret-stdin < secret.txt"]),
    "webhook list": ("List webhooks: id, namespace, URL and events (never their secrets).", {},
                     ["forkd-hub webhook list", "forkd-hub webhook list --namespace acme --json"]),
    "webhook remove": ("Remove a webhook and its delivery log.", {"id": "the webhook's id (from webhook list)"},
                       ["forkd-hub webhook remove 3"]),
    "webhook deliveries": ("Show the delivery log, newest first, with every attempt.", {},
                           ["forkd-hub webhook deliveries --webhook 3 --limit 20"]),
}
