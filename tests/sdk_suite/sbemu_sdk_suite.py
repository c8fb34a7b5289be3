"""pytest plugin for the azure-servicebus sdist's live tests against sbemu (``-p sbemu_sdk_suite``).

- The controller starts the shared sbemu (``servers.start_shared``) before the xdist workers
  start, and hands its coordinates to them in the environment.
- ``test_proxy`` (the sdist's conftest asks for it) is a no-op: nothing is recorded.
- Tests listed in ``not_applicable.txt`` are deselected and counted as *not applicable* with
  their reason (written to ``--sdk-suite-na-json`` for the compatibility table); every other
  test runs, and a failing one fails.
- Tests listed in ``sdk_races.txt`` (a race inside the SDK, not in sbemu) run once more if
  they fail (pytest-rerunfailures' flaky mark); the summary counts the reruns.
- Tests listed in ``alone.txt`` hold a real deadline in the SDK's own threads (a lock renewed
  within its window): ``--sdk-suite-alone exclude`` leaves them out of the parallel run and
  ``--sdk-suite-alone only`` runs just them (``run.sh --alone``: one process, after the rest
  of ``make test``), so other suites' work does not take the CPU their threads need.
- The terminal summary ends with one line: passed / failed / errors / not applicable of total.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import servers

HERE = Path(__file__).resolve().parent
NOT_APPLICABLE = HERE / "not_applicable.txt"
KNOWN_FAILURES = HERE / "known_failures.txt"
SDK_RACES = HERE / "sdk_races.txt"
ALONE = HERE / "alone.txt"


def load_not_applicable(path: Path = NOT_APPLICABLE) -> list[tuple[str, str]]:
    """``(node id pattern, reason)`` pairs: one ``PATTERN  # reason`` a line, fnmatch patterns."""
    entries = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pattern, _, reason = line.partition("#")
        if not reason.strip():
            raise pytest.UsageError(f"{path}: no reason for {pattern.strip()!r}")
        entries.append((pattern.strip(), reason.strip()))
    return entries


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--sdk-suite-na-json",
        default=None,
        help="write the not-applicable tests and their reasons to this JSON file",
    )
    parser.addoption(
        "--sdk-suite-alone",
        choices=("all", "exclude", "only"),
        default="all",
        help="the tests of alone.txt: run with the rest (all), leave out (exclude), or only them",
    )


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config._sdk_na = {}  # type: ignore[attr-defined]
    config._sdk_servers = []  # type: ignore[attr-defined]
    if not _is_worker(config):
        target, processes = servers.start_shared()
        config._sdk_servers = processes  # type: ignore[attr-defined]
        servers.publish(target)
    servers.trust_ca(servers.target().ca_bundle)


def pytest_unconfigure(config: pytest.Config) -> None:
    servers.stop_all(getattr(config, "_sdk_servers", []))


@pytest.fixture(scope="session")
def test_proxy() -> Iterator[None]:
    """Azure's recording proxy: not used, every test runs live against sbemu."""
    yield


def _listed(nodeid: str, entries: list[tuple[str, str]]) -> str | None:
    """The reason of the first entry whose pattern matches `nodeid` (None: not listed)."""
    return next((r for p, r in entries if fnmatch.fnmatchcase(nodeid, p)), None)


@pytest.hookimpl(trylast=True)  # after -k / -m: count only what the run selected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    entries = load_not_applicable()
    known_failures = load_not_applicable(KNOWN_FAILURES)
    races = load_not_applicable(SDK_RACES)
    for item in items:  # open defects: run, reported, and strict (a pass fails the run)
        known = _listed(item.nodeid, known_failures)
        if known is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"KNOWN FAILURE: {known}"))
        if _listed(item.nodeid, races) is not None:
            item.add_marker(pytest.mark.flaky(reruns=1))
    keep, dropped = [], []
    for item in items:
        reason = _listed(item.nodeid, entries)
        if reason is None:
            keep.append(item)
        else:
            dropped.append(item)
            config._sdk_na[item.nodeid] = reason  # type: ignore[attr-defined]
    alone = config.getoption("--sdk-suite-alone")
    if alone != "all":
        entries_alone = load_not_applicable(ALONE)
        want = alone == "only"
        for item in list(keep):
            if (_listed(item.nodeid, entries_alone) is not None) != want:
                keep.remove(item)
                dropped.append(item)  # deselected, not counted as not applicable
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    # every xdist worker collects the whole suite: any of them can tell the controller
    _na_file().write_text(json.dumps(config._sdk_na, indent=1, sort_keys=True))  # type: ignore[attr-defined]


def _na_file() -> Path:
    return Path(servers.target().data_root) / "not-applicable.json"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    stats = terminalreporter.stats
    counts = Counter(
        {
            key: len(stats.get(key, []))
            for key in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
        }
    )
    not_applicable = json.loads(_na_file().read_text()) if _na_file().exists() else {}
    path = config.getoption("--sdk-suite-na-json")
    if path:
        Path(path).write_text(json.dumps(not_applicable, indent=1, sort_keys=True))
    na = len(not_applicable)
    total = sum(counts.values()) + na
    terminalreporter.write_sep("=", "azure-servicebus live tests against sbemu")
    for nodeid, reason in sorted(not_applicable.items()):
        terminalreporter.write_line(f"NOT APPLICABLE {nodeid}: {reason}")
    known = [r for r in stats.get("xfailed", []) if "KNOWN FAILURE" in getattr(r, "wasxfail", "")]
    for report in known:
        terminalreporter.write_line(f"FAILED (known, open defect) {report.nodeid}")
    terminalreporter.write_line(f"sdk-suite: {len(known)} known failures (open defects)")
    for report in stats.get("rerun", []):
        terminalreporter.write_line(f"RERUN (a race in the SDK, sdk_races.txt) {report.nodeid}")
    terminalreporter.write_line(
        f"sdk-suite: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['error']} errors, {counts['skipped']} skipped and {counts['xfailed']} xfailed "
        f"/ {counts['xpassed']} xpassed by the suite's own marks, {na} not applicable, of {total}"
    )
