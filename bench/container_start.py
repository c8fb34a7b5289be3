#!/usr/bin/env python
"""How fast sbemu's image starts: ``make bench-container`` (``bench/container_start.py``).

Builds the image (container/build.sh, as ``make image``), then ``--rounds`` times runs it the
way Microsoft's compose template does (SQL settings set, no config mounted, every port of
Microsoft's image published) and polls ``GET /health`` until 200, as compose and Testcontainers
wait. Prints each round's seconds from ``podman run`` to that answer and their median; exit 1
when the median is over ``--target`` seconds (issue 32's target: 2 s, on a machine doing nothing
else; tests/container only checks that the image becomes healthy, as a loaded CI machine cannot
keep a timing).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "container"))

from container_support import build_image, remove, run_sbemu, wait_healthy  # noqa: E402

COMPOSE_ENV = {
    "SQL_SERVER": "sqledge",
    "MSSQL_SA_PASSWORD": "Password123!",
    "ACCEPT_EULA": "Y",
    "SQL_WAIT_INTERVAL": "0",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--target", type=float, default=2.0, help="seconds, median")
    args = parser.parse_args(argv)
    image = build_image()
    seconds = []
    for n in range(args.rounds):
        running = run_sbemu(image, ports=(5672, 5300, 5671, 443), env=COMPOSE_ENV)
        try:
            seconds.append(wait_healthy(running))
        finally:
            remove(running)
        print(f"round {n + 1}: podman run to /health 200 in {seconds[-1]:.2f} s", flush=True)
    median = statistics.median(seconds)
    verdict = "within" if median <= args.target else "OVER"
    print(f"median {median:.2f} s ({verdict} the {args.target:.1f} s target)")
    return 0 if median <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
