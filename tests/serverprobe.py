"""What a failing test's report says about a server when the failure was a refused connection:
whether each of its ports accepts a connection now, whether the kernel lists a socket
listening on it, and how many TCP sockets the machine holds in each state (a listen queue or
a SYN backlog that overflowed shows there). A refusal from a server whose process still runs
is otherwise a mystery in a CI log."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

# /proc/net/tcp's state codes (include/net/tcp_states.h)
_STATES = {
    "01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
    "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK",
    "0A": "LISTEN", "0B": "CLOSING",
}  # fmt: skip


def mentions_refusal(text: str) -> bool:
    """Whether a failure's text is a refused connection (Python, the SDKs' wrappers, errno)."""
    low = text.lower()
    return "refused" in low or "econnrefused" in low


def _sockets() -> list[tuple[int, str, str, int]]:
    """(local port, state, local address in hex, listen queue length) of every TCP socket."""
    out = []
    for name in ("tcp", "tcp6"):
        path = Path("/proc/net") / name
        try:
            lines = path.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 5:
                continue
            addr, port = f[1].rsplit(":", 1)
            rx_queue = int(f[4].split(":")[1], 16)  # a listener's: connections not accepted
            out.append((int(port, 16), _STATES.get(f[3], f[3]), addr, rx_queue))
    return out


def probe(ports: dict[str, int], host: str = "127.0.0.1") -> str:
    """A few lines on `ports` (name -> port) as they are now, for a test report."""
    lines = []
    for name, port in ports.items():
        if not port:
            continue
        try:
            socket.create_connection((host, port), timeout=3).close()
            now = "accepts a connection"
        except OSError as exc:
            now = f"{type(exc).__name__}: {exc}"
        lines.append(f"{name} port {host}:{port} now: {now}")
    sockets = _sockets()
    wanted = set(ports.values())
    for port, state, addr, queued in sockets:
        if port in wanted and state == "LISTEN":
            lines.append(f"listening: {addr}:{port} (accept queue {queued})")
    lines.append(f"TCP sockets by state: {dict(Counter(s for _, s, _, _ in sockets))}")
    return "\n".join(lines)


def section(ports: dict[str, int], failure: str, alive: Iterable[str] = ()) -> str | None:
    """The report section for a refused connection, None for any other failure."""
    if not mentions_refusal(failure):
        return None
    return "\n".join([*alive, probe(ports)])
