"""How `make test` spreads the suite over pytest-xdist workers (``-n N --dist loadgroup``).

The suite is wait-bound (lock expiry, SDK receive timeouts, server start-ups), so a few workers
overlap those waits on two cores. Each test module is one work unit: its module-scoped server
starts once, on one worker. Spark tests share one SparkSession per worker (session fixture),
so all of tests/spark is one unit; the heavy units (Spark, browser, crash, load) are handed
out first, so the longest ones do not start last and leave the run waiting on one worker.
Nothing here changes what a test checks, and without ``-n`` it does nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

# Directories whose tests form one work unit (they share a session-scoped resource: Spark's
# session, tests/container's image built once and its podman API service).
SHARED_UNITS = {"spark", "container"}
# Work units that take longest (or load the machine most): handed out first.
HEAVY_FIRST = ("spark", "container", "ui", "crash", "load", "faults", "fuzz")


def _unit_of(item: pytest.Item) -> tuple[str, str]:
    """(top-level test directory, work-unit name) of one test."""
    rel = Path(str(item.path)).resolve().relative_to(HERE)
    top = rel.parts[0] if len(rel.parts) > 1 else ""
    unit = top if top in SHARED_UNITS else rel.as_posix()
    return top, unit


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist") or config.getvalue("dist") == "no":
        return
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    keyed = []
    for index, item in enumerate(items):
        top, unit = _unit_of(item)
        if not any(m.name == "xdist_group" for m in item.iter_markers()):
            item.add_marker(pytest.mark.xdist_group(unit))
        keyed.append((rank.get(top, len(rank)), index, item))
    # a stable reorder: heavy directories first, everything else in collection order
    items[:] = [item for _, _, item in sorted(keyed, key=lambda k: (k[0], k[1]))]
