"""Run one command against a real sbemu: ``python tests/sdk_run.py [--server-log F] -- CMD ...``.

The Java and Go suites (``make test-java``, ``make test-go``) are not pytest: this starts
``python -m sbemu serve`` on free loopback ports (sbemu.testing.SbemuProcess, a temporary data
dir and a Config.json with send-only, listen-only and no-manage keys beside the root key),
hands the server's addresses to CMD in the environment, and stops the server after it:

- ``SBEMU_CONNECTION_STRING``: the string sbemu printed, ``UseDevelopmentEmulator=true`` (plain
  TCP); the admin clients take it too (HTTPS to that port, which tells AMQP, TLS and HTTP
  apart by the first byte);
- ``SBEMU_AZURE_CONNECTION_STRING``: Azure's form, no emulator flag, for the port where Azure
  serves the management API and AMQP over WebSockets (sbemu's WebSocket port; with
  ``--azure-ports`` 443, and the string names no port);
- ``SBEMU_ADMIN_CONNECTION_STRING``: the admin port without the flag, so the admin clients speak
  HTTPS to it (the admin port tells TLS from HTTP by the first byte);
- ``SBEMU_CA_FILE`` (sbemu's local CA), ``SSL_CERT_FILE`` (a bundle of the usual CAs plus it, for
  Go's crypto/x509), ``SBEMU_TRUSTSTORE`` / ``SBEMU_TRUSTSTORE_PASSWORD`` (a PKCS12 trust store
  made by ``keytool`` from the CA, for Java's ``javax.net.ssl.trustStore``);
- ``SBEMU_TLS_PORT`` (AMQPS), ``SBEMU_WS_PORT`` (AMQP over WebSockets, ws and wss);
- ``SBEMU_PID``: the server's process id (the large-message test samples its memory).

``--premium`` serves a Premium namespace instead (queues ``huge-tcp`` and ``huge-wss`` with
MaxMessageSizeInKilobytes 102400, Azure's 100 MB messages; the default key only), for the Java
suite's LargeMessagesTest. A Java client over TLS or WebSockets names no namespace the server
could route by (its AMQP open carries the custom endpoint's host), so the Premium namespace is
the server's only one.
- ``SERVICEBUS_*``: the variables the Go module's own live tests read.

``--azure-ports`` runs all that in a network namespace of its own with Azure's ports (AMQPS on
5671, the management API and WebSockets on 443) and the emulator's AMQP port, 5672, where
``SERVICEBUS_*`` and ``SBEMU_AZURE_CONNECTION_STRING`` hold Azure's connection string form
(``Endpoint=sb://localhost/``, no emulator flag), ``SBEMU_CONNECTION_STRING`` the printed
emulator string that names no port, and ``SBEMU_AZURE_PORTS=1``.
Without a namespace (not root, or no unshare/ip) ``SERVICEBUS_*`` hold the emulator form of
the plain AMQP port; a connection string a test derives from it (a SAS-token one drops the
emulator flag and speaks TLS to that port) and an admin client built from it (HTTPS on that
port) cannot work there, so tests/go/live.py skips those tests by name
(tests/go/needs-azure-ports.txt).

The exit status is CMD's, or 1 when the server logged a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sbemu.admin.certs import write_ca_bundle
from sbemu.testing import Ready, SbemuProcess

NAMESPACE = "sbemulatorns"
KEYS = {  # key name -> (key, rights)
    "RootManageSharedAccessKey": ("SAS_KEY_VALUE", ["Manage", "Send", "Listen"]),
    "nomanage": ("NO_MANAGE_KEY_VALUE", ["Send", "Listen"]),
    "sendonly": ("SEND_ONLY_KEY_VALUE", ["Send"]),
    "listenonly": ("LISTEN_ONLY_KEY_VALUE", ["Listen"]),
}
TRUSTSTORE_PASSWORD = "changeit"


# --premium: a Premium namespace (Azure's large messages) instead, for the Java suite's
# LargeMessagesTest (JUnit tag "premium"): queues that take 100 MB messages
PREMIUM_QUEUES = ("huge-tcp", "huge-wss")


def premium_config() -> dict[str, object]:
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": NAMESPACE,
                    "PremiumMessagingPartitions": 1,
                    "Queues": [
                        {
                            "Name": name,
                            "Properties": {
                                "MaxMessageSizeInKilobytes": 102400,
                                "LockDuration": "PT5M",
                            },
                        }
                        for name in PREMIUM_QUEUES
                    ],
                }
            ],
            "Logging": {"Type": "Console"},
        }
    }


def config() -> dict[str, object]:
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": NAMESPACE,
                    "SharedAccessPolicies": [
                        {"KeyName": name, "Key": key, "Rights": rights}
                        for name, (key, rights) in KEYS.items()
                    ],
                    # the queues the Go module's live tests expect to exist (its test-resources.bicep)
                    "Queues": [
                        {"Name": "testQueue", "Properties": {}},
                        {"Name": "testQueueWithSessions", "Properties": {"RequiresSession": True}},
                    ],
                    "Topics": [],
                }
            ],
            "Logging": {"Type": "Console"},
        }
    }


def with_key(conn: str, key_name: str) -> str:
    """The same connection string signed with another of KEYS."""
    conn = re.sub(r"SharedAccessKeyName=[^;]*", f"SharedAccessKeyName={key_name}", conn)
    return re.sub(r"SharedAccessKey=[^;]*", f"SharedAccessKey={KEYS[key_name][0]}", conn)


def make_truststore(ca_file: Path, folder: Path) -> Path:
    """A PKCS12 trust store holding sbemu's CA (the command docs/clients.md shows)."""
    store = folder / "sbemu-truststore.p12"
    subprocess.run(
        [
            "keytool",
            "-importcert",
            "-noprompt",
            "-alias",
            "sbemu-ca",
            "-file",
            str(ca_file),
            "-keystore",
            str(store),
            "-storetype",
            "PKCS12",
            "-storepass",
            TRUSTSTORE_PASSWORD,
        ],
        check=True,
        capture_output=True,
    )
    return store


def azure_form(conn: str) -> str:
    """The connection string as Azure has it: Endpoint=sb://localhost/, no port, no flag."""
    conn = re.sub(r"Endpoint=sb://[^;]+", "Endpoint=sb://localhost/", conn)
    return re.sub(r";?UseDevelopmentEmulator=true", "", conn)


def environment(ready: Ready, folder: Path, azure_ports: bool) -> dict[str, str]:
    server_conn, admin_port = ready.connection_string, ready.admin_port
    admin_conn = re.sub(
        r"Endpoint=sb://[^;]+", f"Endpoint=sb://localhost:{admin_port}", server_conn
    )
    admin_conn = re.sub(r";?UseDevelopmentEmulator=true", "", admin_conn)
    # the Go module's live tests derive connection strings from these: a SAS-token one drops
    # the emulator flag and speaks TLS to the endpoint's host:port (AMQP, and HTTPS for the
    # admin client). With Azure's ports (AMQPS on 5671, HTTPS on 443) the string is Azure's
    # own and they work as against Azure; on free ports TLS would meet the plain AMQP port
    # (connlost; "first record does not look like a TLS handshake"): live.py skips them
    live_conn = azure_form(server_conn) if azure_ports else server_conn
    # where Azure serves the management API: 443 (the WebSocket port), a string without a port
    azure_conn = azure_form(server_conn)
    if not azure_ports and ready.ws_port is not None:
        azure_conn = azure_conn.replace("sb://localhost/", f"sb://localhost:{ready.ws_port}/")
    env = {
        "SBEMU_CONNECTION_STRING": server_conn,
        "SBEMU_AZURE_CONNECTION_STRING": azure_conn,
        "SBEMU_ADMIN_CONNECTION_STRING": admin_conn,
        "SBEMU_CA_FILE": str(ready.ca_file),
        "SSL_CERT_FILE": str(write_ca_bundle(ready.ca_file, folder / "ca-bundle.pem")[0]),
        "SERVICEBUS_CONNECTION_STRING": live_conn,
        "SERVICEBUS_CONNECTION_STRING_PREMIUM": live_conn,
        "SERVICEBUS_CONNECTION_STRING_NO_MANAGE": with_key(live_conn, "nomanage"),
        "SERVICEBUS_CONNECTION_STRING_SEND_ONLY": with_key(live_conn, "sendonly"),
        "SERVICEBUS_CONNECTION_STRING_LISTEN_ONLY": with_key(live_conn, "listenonly"),
        # the host the Go live tests' token-credential clients would use (those are listed as
        # not applicable: no emulator issues Azure AD tokens)
        "SERVICEBUS_ENDPOINT": "localhost" if azure_ports else f"localhost:{admin_port}",
        "SERVICEBUS_ENDPOINT_PREMIUM": "localhost" if azure_ports else f"localhost:{admin_port}",
        "SBEMU_AZURE_PORTS": "1" if azure_ports else "0",
    }
    env["SBEMU_PID"] = str(ready.pid)
    if ready.tls_port is not None:
        env["SBEMU_TLS_PORT"] = str(ready.tls_port)
    if ready.ws_port is not None:
        env["SBEMU_WS_PORT"] = str(ready.ws_port)
    if shutil.which("keytool"):
        env["SBEMU_TRUSTSTORE"] = str(make_truststore(ready.ca_file, folder))
        env["SBEMU_TRUSTSTORE_PASSWORD"] = TRUSTSTORE_PASSWORD
    return env


# Azure's ports need a loopback where nothing else listens: a network namespace of our own.
AZURE_PORTS = ("--port", "5672", "--tls-port", "5671", "--ws-port", "443")
_IN_NETNS = "SBEMU_SDK_RUN_NETNS"


def netns_unavailable() -> str | None:
    """Why this process cannot make a network namespace of its own, or None."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return "needs root with unshare and ip"
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    return None if probe.returncode == 0 else probe.stderr.decode(errors="replace").strip()


def in_own_netns(argv: list[str]) -> int:
    """Run this script again inside a new network namespace (loopback only, lo brought up)."""
    env = {**os.environ, _IN_NETNS: "1"}
    script = 'ip link set lo up && exec "$@"'
    return subprocess.run(
        ["unshare", "--net", "sh", "-c", script, "sh", sys.executable, __file__, *argv],
        env=env,
        check=False,
    ).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cwd", default=None, help="directory CMD runs in")
    parser.add_argument(
        "--server-log",
        default=None,
        help="write the server's output here (at debug level) for diagnosis",
    )
    parser.add_argument(
        "--azure-ports",
        action="store_true",
        help="serve AMQP on 5672, AMQPS on 5671 and the management API (HTTPS) and "
        "WebSockets on 443, as Azure and the emulator do, in a network namespace of its own "
        "(root); SERVICEBUS_* then hold Azure's connection string form "
        "(Endpoint=sb://localhost/, no flag)",
    )
    parser.add_argument(
        "--premium",
        action="store_true",
        help="serve a Premium namespace whose queues huge-tcp and huge-wss take 100 MB messages",
    )
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command")
    if args.azure_ports and os.environ.get(_IN_NETNS) != "1":
        why = netns_unavailable()
        if why is not None:
            print(f"sdk_run: --azure-ports {why}; serving on free ports instead", file=sys.stderr)
            args.azure_ports = False
        else:
            return in_own_netns(argv)
    folder = Path(tempfile.mkdtemp(prefix="sbemu-sdk-"))
    config_path = folder / "config.json"
    config_path.write_text(json.dumps(premium_config() if args.premium else config()))
    server = SbemuProcess(
        config=config_path,
        data_dir=folder / "data",
        log_level="debug" if args.server_log else "warning",
        stderr=folder / "server.stderr",
        args=AZURE_PORTS if args.azure_ports else (),
    )
    try:
        ready = server.start()
        env = {**os.environ, **environment(ready, folder, args.azure_ports)}
        rc = subprocess.run(cmd, cwd=args.cwd, env=env, check=False).returncode
    finally:
        server.stop()
        log = server.stderr_text(all_starts=True)
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
    if args.server_log:
        Path(args.server_log).write_text(log)
    if "Traceback" in log:
        print("sbemu logged a traceback:\n" + log[-6000:], file=sys.stderr)
        return rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
