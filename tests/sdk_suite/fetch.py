"""Download the pinned azure-servicebus sdist (tests/sdk_suite/sdist.txt) and unpack its tests.

``python tests/sdk_suite/fetch.py DEST`` runs ``pip download --require-hashes`` (pip checks the
sha256 pinned in sdist.txt), then unpacks the archive's ``tests/`` folder into DEST, leaving out
the files our stand-ins replace (``servicebus_preparer.py``: Azure Resource Manager) and the perf
tests. Idempotent: a DEST that holds the pinned version is left alone. Prints DEST's tests folder.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PIN_FILE = HERE / "sdist.txt"
LEFT_OUT = ("tests/servicebus_preparer.py", "tests/perf_tests")


def pinned_version() -> str:
    match = re.search(r"^azure-servicebus==(\S+)", PIN_FILE.read_text(), re.M)
    if not match:
        raise SystemExit(f"{PIN_FILE}: no azure-servicebus==VERSION line")
    return match.group(1)


def fetch(dest: Path) -> Path:
    version = pinned_version()
    folder = dest / f"azure_servicebus-{version}"
    marker = folder / ".unpacked"
    if marker.exists():
        return folder / "tests"
    downloads = dest / "download"
    downloads.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--require-hashes",
            "-r",
            str(PIN_FILE),
            "-d",
            str(downloads),
        ],
        check=True,
    )
    archive = downloads / f"azure_servicebus-{version}.tar.gz"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    prefix = f"azure_servicebus-{version}/"
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            inner = member.name.removeprefix(prefix)
            if inner.startswith("tests/") and not inner.startswith(LEFT_OUT):
                member.name = inner
                members.append(member)
        tar.extractall(folder, members=members, filter="data")
    marker.write_text(version + "\n")
    return folder / "tests"


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".venv/sdk-suite")
    print(fetch(target.resolve()))
