"""The operator commands: ``sbemu init`` (a starter Config.json), ``purge``, ``cert`` and
``partition`` (offline/online/status through the admin port)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from sbemu.cli.common import DEFAULT_DATA_DIR, ENV_DATA_DIR, _fail
from sbemu.cli.serve import ENV_CONNECTION_STRING, resolve_data_dir


def _add_init(subcommands: Any) -> None:
    init = subcommands.add_parser(
        "init",
        help="write a starter Config.json (one entity of each kind)",
        description="Write a starter Config.json: a plain and a partitioned queue, a session "
        "queue, a duplicate-detection queue and a topic with SQL and correlation rules.",
    )
    init.add_argument("path", nargs="?", default="Config.json", help="where (default Config.json)")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.set_defaults(handler=_init)


def _init(args: argparse.Namespace) -> int:
    from sbemu.cli.starter import starter_text

    path = Path(args.path)
    if path.exists() and not args.force:
        return _fail(f"{path} already exists (use --force to overwrite it)")
    try:
        path.write_text(starter_text())
    except OSError as exc:
        return _fail(f"cannot write {path}: {exc.strerror or exc}")
    print(f"wrote {path}; start with: sbemu serve --config {path}")
    return 0


def _add_purge(subcommands: Any) -> None:
    purge = subcommands.add_parser(
        "purge",
        help="delete every message of an entity, or of a whole namespace, on a running server",
        description="Delete every message (active, deferred, scheduled, dead-lettered) of one "
        "queue or topic (all its subscriptions), or of every entity of a namespace. Each removed "
        "message is logged as 'purged' in its partition log.",
    )
    purge.add_argument("target", metavar="NAMESPACE[/ENTITY]")
    _add_admin_url(purge)
    purge.set_defaults(handler=_run_purge)


def _run_purge(args: Any) -> int:
    from urllib.parse import quote

    body = _admin_call(args, "POST", f"/purge/{quote(args.target.strip('/'))}", timeout=60)
    if isinstance(body, int):
        return body
    for name, count in sorted(body.get("purged", {}).items()):
        print(f"{body.get('namespace')}/{name}: {count} message(s) purged")
    return 0


def _add_admin_url(parser: Any) -> None:
    parser.add_argument(
        "--admin-url",
        default=None,
        help="admin URL of the running server [SBEMU_ADMIN_URL; default: http://127.0.0.1:5300]",
    )


def _admin_call(args: Any, method: str, path: str, timeout: float) -> dict[str, Any] | int:
    """One request to a running server's admin port: its JSON body, or an exit status after
    printing why (1: the server refused, 2: it could not be reached)."""
    import json as _json
    import urllib.error
    import urllib.request

    base = args.admin_url or os.environ.get("SBEMU_ADMIN_URL") or "http://127.0.0.1:5300"
    base = base.rstrip("/")
    data = b"" if method == "POST" else None
    request = urllib.request.Request(base + path, data=data, method=method)
    try:
        for name, value in _admin_credentials(base, method, timeout).items():
            request.add_header(name, value)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: dict[str, Any] = _json.loads(response.read() or b"{}")
            return body
    except urllib.error.HTTPError as exc:
        detail = _json.loads(exc.read() or b"{}").get("error", exc.reason)
        print(f"sbemu: {detail}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"sbemu: cannot reach the server at {base}: {exc}", file=sys.stderr)
        return 2


def _admin_credentials(base: str, method: str, timeout: float) -> dict[str, str]:
    """What a request to the admin port carries (its access policy: docs/security.md): a SAS
    token signed with SBEMU_CONNECTION_STRING's key when that is set (needed beyond loopback),
    else for a POST on loopback the CSRF token the dashboard's page reads from /api/session."""
    import json as _json
    import time as _time
    import urllib.request

    from sbemu.auth.sas import make_sas_token

    conn = os.environ.get(ENV_CONNECTION_STRING)
    if conn:
        fields = dict(p.split("=", 1) for p in conn.split(";") if "=" in p)
        name, key = fields.get("SharedAccessKeyName"), fields.get("SharedAccessKey")
        if name and key:
            endpoint = fields.get("Endpoint", "sb://localhost/").rstrip("/") + "/"
            token = make_sas_token(endpoint, name, key, int(_time.time()) + 600)
            return {"Authorization": token}
    if method != "POST":
        return {}
    with urllib.request.urlopen(base + "/api/session", timeout=timeout) as response:
        return {"X-CSRF-Token": str(_json.loads(response.read())["csrf"])}


def _add_cert(subcommands: Any) -> None:
    cert = subcommands.add_parser(
        "cert",
        help="print the path of the local CA certificate the admin port's TLS chains to",
        description="Print the path of the CA that the server using the data dir created on its "
        "first start (<data dir>/tls/rootCA.pem). The data dir is found as `sbemu serve` finds "
        "it: --data-dir, else SBEMU_DATA_DIR, else ./.sbemu in the current directory. Nothing is "
        "created: without a CA there, it says which data dir it looked at. --bundle prints a "
        "PEM file with the system's CAs and this one, for SSL_CERT_FILE.",
        epilog="examples: export SSL_CERT_FILE=$(sbemu cert --bundle) "
        "REQUESTS_CA_BUNDLE=$(sbemu cert --bundle); export NODE_EXTRA_CA_CERTS=$(sbemu cert)",
    )
    cert.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"the server's data dir [{ENV_DATA_DIR}; default: ./{DEFAULT_DATA_DIR}]",
    )
    cert.add_argument(
        "--bundle",
        action="store_true",
        help="print a CA bundle instead: the system's CAs plus sbemu's, in one PEM file "
        "(<data dir>/tls/ca-bundle.pem, rewritten each time)",
    )
    cert.set_defaults(handler=_run_cert)


def _run_cert(args: Any) -> int:
    from sbemu.admin.certs import ca_path, write_ca_bundle

    data_dir, source = resolve_data_dir(args.data_dir, os.environ)
    ca_file = ca_path(data_dir)
    if not ca_file.is_file():
        state = "no such directory" if not data_dir.exists() else "no tls/rootCA.pem in it"
        return _fail(
            f"no sbemu CA for data dir {data_dir} ({source}; {state}): a server creates it on "
            f"its first start. Start one (sbemu serve / make run), or point at the data dir "
            f"of the running server with --data-dir DIR or {ENV_DATA_DIR}=DIR."
        )
    if not _data_dir_in_use(data_dir):
        print(
            f"sbemu: note: no server is running on {data_dir} now; this is the CA it will use",
            file=sys.stderr,
        )
    if not args.bundle:
        print(ca_file.resolve())
        return 0
    try:
        bundle, system = write_ca_bundle(ca_file, ca_file.parent / "ca-bundle.pem")
    except OSError as exc:
        return _fail(f"cannot write the CA bundle in {ca_file.parent}: {exc.strerror or exc}")
    if system is None:
        print(
            "sbemu: warning: no system CA file found; the bundle holds only sbemu's CA",
            file=sys.stderr,
        )
    print(bundle.resolve())
    return 0


def _data_dir_in_use(data_dir: Path) -> bool:
    """Whether a server holds the data dir's lock (partitions.layout.lock_data_dir); nothing
    is created."""
    import fcntl

    try:
        fd = os.open(data_dir / ".lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (drops our probe's lock)
    return False


def _add_partition(subcommands: Any) -> None:
    part = subcommands.add_parser(
        "partition",
        help="take a partition of a running server offline or bring it back online",
        description="Simulate a partition store outage on a running sbemu (spec P7, P8): "
        "key-less sends go to other partitions, sends pinned to it fail with server-busy "
        "(retried by the SDKs), its messages wait until it is back. 'status' lists every "
        "entity's availability and the partitions out of service (NAMESPACE/ENTITY: each "
        "partition of that entity).",
        epilog="examples: sbemu partition offline sbemulatorns/queue.partitioned 3; "
        "sbemu partition status; sbemu partition status sbemulatorns/queue.partitioned --json",
    )
    part.add_argument("action", choices=("offline", "online", "status"))
    part.add_argument(
        "entity",
        metavar="NAMESPACE/ENTITY",
        nargs="?",
        help="the queue or topic, e.g. sbemulatorns/queue.partitioned (optional for status)",
    )
    part.add_argument(
        "partition",
        metavar="N",
        type=int,
        nargs="?",
        help="the partition number, 0 to the entity's partition count - 1 (the number "
        "`status` and the dashboard show, and the top 16 bits of a message's sequence number); "
        "required for offline and online",
    )
    part.add_argument(
        "--json", action="store_true", help="status: print the server's JSON instead of a table"
    )
    _add_admin_url(part)
    part.set_defaults(handler=_run_partition)


def _partition_target_problem(args: Any) -> str | None:
    """Why ``partition offline|online`` cannot run as given, with the command that would."""
    action, entity, n = args.action, (args.entity or "").strip("/"), args.partition
    if not entity:
        return f"name the entity and the partition: sbemu partition {action} NAMESPACE/ENTITY N"
    if "/" not in entity:
        return (
            f"{entity!r} names no namespace: give NAMESPACE/ENTITY, e.g. sbemu partition "
            f"{action} sbemulatorns/{entity} {n if n is not None else 'N'} (`sbemu partition "
            "status` lists the entities)"
        )
    if n is None:
        return (
            f"name the partition too: sbemu partition {action} {entity} N, N from 0 to the "
            f"entity's partition count - 1 (`sbemu partition status {entity}` lists them)"
        )
    return None


def _run_partition(args: Any) -> int:
    import json as _json
    from urllib.parse import quote

    from sbemu.cli.partitiontable import entity_table, partition_table

    if args.action == "status":
        body = _admin_call(args, "GET", "/partitions", timeout=10)
        if isinstance(body, int):
            return body
        if args.entity:
            wanted = args.entity.strip("/").lower()
            found = [
                e
                for e in body.get("entities", [])
                if f"{e['namespace']}/{e['entity']}".lower() == wanted
            ]
            if not found:
                return _fail(f"no entity {args.entity!r} on the server (NAMESPACE/ENTITY)")
            print(_json.dumps(found[0], indent=2) if args.json else partition_table(found[0]))
        else:
            print(_json.dumps(body, indent=2) if args.json else entity_table(body))
        return 0
    problem = _partition_target_problem(args)
    if problem is not None:
        return _fail(problem)
    namespace, entity = args.entity.split("/", 1)
    path = (
        f"/partitions/{quote(namespace, safe='')}/{quote(entity, safe='')}"
        f"/{args.partition}/{args.action}"
    )
    body = _admin_call(args, "POST", path, timeout=10)
    if isinstance(body, int):
        return body
    if args.json:
        print(_json.dumps(body, indent=2))
    else:
        print(
            f"partition {args.partition} of {args.entity} is now {args.action}; "
            f"the entity is {body.get('status', '?')}"
        )
    return 0
