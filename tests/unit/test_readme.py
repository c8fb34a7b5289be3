"""The README's first example runs on a fresh machine as written (issue 33, item 5): `make run`
installs the server only, so the README names the SDK install before the example uses it."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_sdk_install_comes_before_the_first_example_that_imports_it() -> None:
    text = README.read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", text, re.S)
    assert example is not None and "from azure.servicebus import" in example.group(1)
    before = text[: example.start()]
    assert re.search(r"^pip install azure-servicebus$", before, re.M), (
        "the README uses azure-servicebus before it says to install it"
    )
