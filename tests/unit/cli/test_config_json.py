"""The configuration inline in an environment variable (issue 33, item 5): SBEMU_CONFIG_JSON,
and CONFIG_JSON, the name Microsoft's emulator users asked for (their issue #108)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sbemu.cli import UsageError, build_parser, resolve_settings
from sbemu.testing import SbemuProcess

DOC = {
    "UserConfig": {
        "Namespaces": [{"Name": "inlinens", "Queues": [{"Name": "from-env"}], "Topics": []}],
        "Logging": {"Type": "Console"},
    }
}


def settings(argv: list[str], env: dict[str, str]):  # type: ignore[no-untyped-def]
    return resolve_settings(build_parser().parse_args(["serve", *argv]), env, Path("/work"))


@pytest.mark.parametrize("name", ["SBEMU_CONFIG_JSON", "CONFIG_JSON"])
def test_either_name_takes_the_json(name: str) -> None:
    got = settings([], {name: json.dumps(DOC)})
    assert got.config_path is None and got.config_json == (json.dumps(DOC), name)


def test_a_config_file_flag_wins_over_the_inline_json() -> None:
    got = settings(["--config", "/c.json"], {"CONFIG_JSON": "{}"})
    assert got.config_path == Path("/c.json") and got.config_json is None


@pytest.mark.parametrize(
    "env",
    [
        {"SBEMU_CONFIG": "/c.json", "SBEMU_CONFIG_JSON": "{}"},
        {"SBEMU_CONFIG_JSON": "{}", "CONFIG_JSON": "[]"},
    ],
)
def test_two_sources_at_once_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(UsageError, match="unset"):
        settings([], env)


def test_serve_runs_the_inline_config(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    env["CONFIG_JSON"] = json.dumps(DOC)
    proc = SbemuProcess(data_dir=tmp_path / "data", env=env)
    try:
        ready = proc.start()
        assert [ns["name"] for ns in ready.namespaces] == ["inlinens"]
    finally:
        proc.stop()
        proc.cleanup()


def test_a_bad_inline_config_names_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBEMU_")}
    env["SBEMU_CONFIG_JSON"] = '{"UserConfig": {"Namespaces": []}}'
    proc = SbemuProcess(data_dir=tmp_path / "data", env=env)
    try:
        with pytest.raises(Exception, match="SBEMU_CONFIG_JSON: UserConfig.Namespaces"):
            proc.start()
    finally:
        proc.cleanup()
