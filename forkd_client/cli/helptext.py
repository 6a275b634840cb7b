"""What ``forkd COMMAND --help`` says beyond one line: a description, the arguments the
registering module left unexplained, and examples. One table, applied to the built parser by
:func:`clikit.helpdoc.document` (shared with ``forkd-hub``), so a command group module stays about behaviour. A test walks every
subcommand's ``--help`` and fails when one lacks a description, an argument's help or an example.
"""

from __future__ import annotations

from clikit.helpdoc import HelpTable, document

__all__ = ["HELP", "document"]

_TAG = "local snapshot tag ([A-Za-z0-9_][A-Za-z0-9_-]{0,63})"

#: command path → (description, {dest: help for arguments without one}, examples)
HELP: HelpTable = {
    "images": (
        "List the local snapshots: tag, parent, chain depth and sizes. SIZE is what forking one needs on disk "
        "(UNIQUE SIZE, its own files, which rmi frees, plus SHARED SIZE, its ancestors' files).",
        {},
        [
            "forkd images",
            "forkd images --json",
            "forkd images -q --filter 'reference=py-*'",
            "forkd images --filter dangling=true",
            "forkd images --format 'table {{.Tag}}\\t{{.UniqueSize}}\\t{{.SharedSize}}'",
            "forkd images --format json",
        ],
    ),
    "inspect": (
        "Show one snapshot: its chain base to head, its files and their digests; --verify re-checks "
        "every link's parent content hash. Given a hub reference (ns/repo[:tag|@digest]), show what the "
        "hub holds: annotations, provenance and other referrers.",
        {"tag": _TAG + ", or a hub reference [HOST/]ns/repo[:tag|@digest]"},
        ["forkd inspect py-numpy", "forkd inspect py-numpy --verify --json", "forkd inspect acme/python:numpy"],
    ),
    "tag": (
        "Make DST a new snapshot with SRC's content (reflinked where the filesystem can).",
        {"src": "existing local snapshot", "dst": "new local tag"},
        ["forkd tag py-numpy py-numpy-backup"],
    ),
    "prune": (
        "Remove what interrupted transfers left: staged files of pulls no process is using (the state a pull "
        "resumes from), scratch directories of dead processes, resumable upload records, and records of files "
        "that are gone. Never removes a snapshot.",
        {},
        ["forkd prune --dry-run", "forkd prune --json"],
    ),
    "rmi": (
        "Remove local snapshots. A snapshot others chain on needs --cascade (remove them too) or --force.",
        {"tags": "local snapshot tag(s) to remove"},
        ["forkd rmi py-old", "forkd rmi py-base --cascade"],
    ),
    "import": (
        "Install a directory holding vmstate and memory.bin (and optionally rootfs.ext4) as a snapshot, "
        "optionally as a chain link on --parent.",
        {"dir": "directory with vmstate, memory.bin [, rootfs.ext4]", "tag": "local tag to give it"},
        ["forkd import ./snap py-base", "forkd import ./snap2 py-numpy --parent py-base"],
    ),
    "snapshot-compact": (
        "Verify a chain and write its head, fully assembled, as a new base snapshot (no parent).",
        {},
        ["forkd snapshot-compact --from py-pandas --to py-pandas-flat"],
    ),
    "pack": (
        "Write a snapshot and its chain as a forkd pack (.forkd-snapshot.tar.zst) that forkd and 'forkd unpack' read.",
        {"tag": "local snapshot to pack (its chain comes along)"},
        ["forkd pack py-numpy -o py-numpy.forkd-snapshot.tar.zst"],
    ),
    "unpack": (
        "Install the snapshots of a forkd pack (v1 or v2), checking every digest before anything is installed.",
        {"file": "the pack file (.forkd-snapshot.tar.zst)"},
        ["forkd unpack py-numpy.forkd-snapshot.tar.zst", "forkd unpack base.forkd-snapshot.tar.zst --tag base"],
    ),
    "login": (
        "Check that a hub accepts a token and store it (XDG config, mode 0600). The first login becomes "
        "the default hub; later ones only with --default. On a terminal without --token-stdin or --token it "
        "asks for the token (not echoed), as docker login does.",
        {},
        [
            "forkd-hub token create laptop --scope 'push:acme/*' | forkd login http://127.0.0.1:8080 --token-stdin",
            "forkd login https://hub.example.com --token-stdin --default < token.txt",
            "forkd login https://hub.example.com",
        ],
    ),
    "logout": (
        "Forget the stored token of a hub (default: the default hub).",
        {"url": "hub URL (default: the default hub)"},
        ["forkd logout", "forkd logout https://hub.example.com"],
    ),
    "push": (
        "Push a local snapshot chain to a hub: only the chunks the hub lacks are sent, and an interrupted "
        "push resumes where it stopped.",
        {"local_tag": "local snapshot to push (its chain comes along)"},
        [
            "forkd push py-numpy acme/python:numpy",
            "forkd push py-base 127.0.0.1:8080/acme/python:base --public",
            "forkd push py-numpy acme/python:nightly --json --annotation org.opencontainers.image.revision=$GIT_SHA",
            "forkd push py-numpy team/python:numpy --sign ci-signing.key",
        ],
    ),
    "pull": (
        "Pull a snapshot chain from a hub: every chunk is verified on arrival and every file after "
        "assembly; an interrupted pull resumes where it stopped. Reads go through the hub's mirrors when "
        "some are configured (FORKD_HUB_MIRRORS='HUB=MIRROR[,MIRROR]', or [mirrors] in "
        "$XDG_CONFIG_HOME/forkd/config.toml; a mirror that is down is skipped; docs/mirrors.md).",
        {},
        [
            "forkd pull acme/python:numpy",
            "FORKD_HUB_MIRRORS=https://hub.example=http://mirror.eu:5001 forkd pull hub.example/acme/python:numpy",
            "forkd pull acme/python@blake3:<digest> --as py-pinned",
            "forkd pull team/python:numpy --verify-key ci-signing.key.pub",
            "forkd pull acme/python:numpy --lazy",
        ],
    ),
    "node": (
        "Tell a hub what this host holds, so it can place snapshots where they restore fastest "
        "(docs/placement.md): layers pulled from it, partly pulled layers, free disk and memory, VMMs.",
        {"node_command": "report (once), serve (keep reporting) or status (what was last reported)"},
        ["forkd node serve --label zone=a", "forkd node report --json"],
    ),
    "node report": (
        "Report this host's inventory once (for cron or a systemd timer): a delta against what the hub "
        "acknowledged last, or everything with --full. The token is a node token named like the host.",
        {},
        [
            "forkd-hub token create worker-1 --scope 'node:acme/*' | forkd login http://hub:8080 --token-stdin",
            "forkd node report --host worker-1 --label zone=a",
        ],
    ),
    "node serve": (
        "Run the node agent: report after every pull, removal and prune (of any forkd process on this store) "
        "and on a heartbeat, until SIGTERM. One agent per store.",
        {},
        ["forkd node serve --host worker-1 --label zone=a --heartbeat 60"],
    ),
    "node status": (
        "Show what the last report told which hub, and whether the store changed since.",
        {},
        ["forkd node status", "forkd node status --json"],
    ),
    "place": (
        "Rank the hosts that report to a hub by the bytes of a snapshot's whole chain they are missing "
        "(chunk-exact, counting what each already holds of any chain), with the bytes per link, the estimated "
        "transfer time, and the hosts that cannot take it and why.",
        {},
        [
            "forkd place acme/python:numpy",
            "forkd place acme/python:numpy --hosts worker-1,worker-2 --min-free-memory 4GiB --json",
            "forkd place acme/python:numpy --selector zone=a --vmm qemu-microvm",
        ],
    ),
    "keygen": (
        "Make an Ed25519 key pair for 'forkd push --sign': the private key (mode 0600, never overwritten) "
        "and PATH.pub beside it, whose holders verify with 'forkd pull --verify-key'.",
        {},
        ["forkd keygen", "forkd keygen ci-signing.key --json"],
    ),
    "search": (
        "Search the repositories of a hub you may read.",
        {
            "query": "words to look for in names and descriptions (default: list all)",
            "limit": "at most N repositories (default 100)",
        },
        ["forkd search python", "forkd search --hub https://hub.example.com --json"],
    ),
    "delete": (
        "Delete a snapshot (by tag or digest) on a hub. One others chain on needs --cascade or --force.",
        {},
        ["forkd delete acme/python:old", "forkd delete acme/python:base --cascade"],
    ),
    "repo": (
        "Show or change a repository on a hub with your own token: visibility, description and README "
        "(Markdown, as the web catalog renders them). Changing needs push (or admin) there; deleting a tag is "
        "'forkd delete NS/REPO:TAG'.",
        {"repo_command": "show (read) or set (change)"},
        [
            "forkd repo show acme/python",
            "forkd repo set acme/python --public --description 'Python 3.12 with **NumPy**'",
        ],
    ),
    "repo show": (
        "A repository's visibility, pull count, description, README and tags.",
        {},
        ["forkd repo show acme/python", "forkd repo show hub.example.com/acme/python --json"],
    ),
    "repo set": (
        "Change a repository's visibility, description or README (needs push or admin there); what is not "
        "given stays as it is.",
        {},
        [
            "forkd repo set acme/python --private",
            "forkd repo set acme/python --description-file DESCRIPTION.md --readme-file README.md",
        ],
    ),
    "token": (
        "Manage the robot tokens of your namespaces on a hub: a token with push on a namespace makes tokens "
        "within its own scopes (never wider, never outliving it) and lists and revokes them. Operators on the "
        "hub's host use 'forkd-hub token'.",
        {"token_command": "list, create or revoke"},
        ["forkd token list", "forkd token create ci --scope 'push:acme/python' --expires 30d"],
    ),
    "token list": (
        "The unrevoked tokens your token may manage, oldest first.",
        {},
        ["forkd token list", "forkd token list --namespace acme --json"],
    ),
    "token create": (
        "Make a robot token within your own scopes; its secret is printed once on standard output.",
        {},
        [
            "forkd token create ci --scope 'push:acme/python' --scope 'pull:acme/*' --expires 30d",
            "forkd token create ci --scope 'push:acme/*' | gh secret set FORKD_TOKEN",
        ],
    ),
    "token revoke": (
        "Revoke a robot token you manage; the hub refuses it from then on.",
        {},
        ["forkd token revoke ci"],
    ),
    "audit": (
        "A namespace's audit log (pushes, tags, deletes, tokens, webhooks), newest first, for a token with push "
        "or delete there.",
        {},
        ["forkd audit acme", "forkd audit acme --limit 20 --before 1234 --json"],
    ),
    "snapshot": (
        "Boot the guest, optionally run a command in it, and save the warm VM as a base snapshot.",
        {"tag": "local tag for the new snapshot"},
        ["forkd snapshot --tag py-base --exec 'echo warm'", "forkd snapshot --tag big --mem-mib 1024"],
    ),
    "snapshot-diff": (
        "Restore a snapshot, run a command, and save the result as a chain link on it. Its memory and its root "
        "filesystem changes travel as chunks when pushed.",
        {"tag": "local tag for the new link"},
        [
            "forkd snapshot-diff --from py-base --tag py-tools --exec 'touch /root/tools'",
            "forkd snapshot-diff --from py-base --tag py-numpy --net --exec 'pip install --break-system-packages numpy'",
        ],
    ),
    "from-image": (
        "Bake a base snapshot from an OCI image: its layers (verified by sha256, applied as a container runtime "
        "does) become an ext4 root filesystem that the guest boots; --exec steps run inside as root with the "
        "image's environment, like RUN lines. The image's digest and name are recorded as annotations. Built "
        "root filesystems are cached by the image's digest (docs/images.md).",
        {},
        [
            "forkd from-image registry.example.com/library/python:3.12-slim --tag py-base",
            "forkd from-image oci:./python-layout:3.12 --tag py-base --exec 'python3 -V'",
            "forkd from-image docker-archive:python.tar --tag py-base --mem-mib 1024",
            "forkd from-image 127.0.0.1:8080/acme/python:3.12 --tag py-base --net --exec 'pip install numpy'",
        ],
    ),
    "from-debian": (
        "Bake a base snapshot from Debian packages: mmdebstrap builds a minimal userland of --suite with "
        "--include packages from the Debian archive this host's apt uses; it becomes the guest's root "
        "filesystem. The suite and the installed versions are recorded as annotations; built userlands are "
        "cached by their inputs.",
        {},
        [
            "forkd from-debian --include python3,python3-pip --tag py-base",
            "forkd from-debian --suite bookworm --include python3-numpy --tag py-numpy --exec 'python3 -c \"import numpy\"'",
        ],
    ),
    "fork": (
        "Start N copy-on-write children of a snapshot (chain verified, host compatibility checked), "
        "optionally running a command in each.",
        {"tag": "local snapshot to fork"},
        [
            "forkd fork py-numpy -n 10 --exec 'python -c \"import numpy\"'",
            "forkd fork py-base --keep",
            "forkd fork acme/python:numpy --lazy -n 4 --exec 'python -c \"import numpy\"'",
        ],
    ),
    "guest": (
        "Manage the default guest image (kernel + busybox initramfs) used by snapshot.",
        {"guest_command": "what to do (build)"},
        ["forkd guest build"],
    ),
    "guest build": (
        "Build the default guest image, or reuse a cached build with the same inputs.",
        {},
        ["forkd guest build", "forkd guest build --out ./guest --force"],
    ),
}
