"""The command line: settings precedence (pure), ready lines, and `python -m sbemu serve` exits."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbemu import __version__
from sbemu.cli import (
    DEFAULT_PORT,
    Settings,
    UsageError,
    build_parser,
    connection_string,
    main,
    ready_lines,
    resolve_settings,
)
from sbemu.config import default_config, parse_config


def settings(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path = Path("/work")
) -> Settings:
    return resolve_settings(build_parser().parse_args(["serve", *argv]), env or {}, cwd)


# ------------------------------------------------------------------------------------------------
# resolve_settings: flag > environment > default
# ------------------------------------------------------------------------------------------------


def test_defaults() -> None:
    assert settings([]) == Settings(
        config_path=None,
        data_dir=Path("/work/.sbemu"),
        host="127.0.0.1",
        port=5672,
        admin_port=5300,
        log_level="info",
    )


ENV = {
    "SBEMU_CONFIG": "env.json",
    "SBEMU_DATA_DIR": "/data/env",
    "SBEMU_HOST": "0.0.0.0",
    "SBEMU_PORT": "5673",
    "SBEMU_ADMIN_PORT": "5301",
    "SBEMU_LOG_LEVEL": "DEBUG",
}


def test_environment_over_defaults() -> None:
    assert settings([], ENV) == Settings(
        config_path=Path("/work/env.json"),
        data_dir=Path("/data/env"),
        host="0.0.0.0",
        port=5673,
        admin_port=5301,
        log_level="debug",
    )


def test_flags_over_environment() -> None:
    argv = [
        "--config", "/etc/flag.json",
        "--data-dir", "flagdata",
        "--host", "::1",
        "--port", "0",
        "--admin-port", "0",
        "--log-level", "warning",
    ]  # fmt: skip
    assert settings(argv, ENV) == Settings(
        config_path=Path("/etc/flag.json"),
        data_dir=Path("/work/flagdata"),
        host="::1",
        port=0,
        admin_port=0,
        log_level="warning",
    )


def test_flags_and_environment_mix_per_setting() -> None:
    s = settings(["--port", "6000"], {"SBEMU_PORT": "7000", "SBEMU_ADMIN_PORT": "7001"})
    assert (s.port, s.admin_port) == (6000, 7001)


def test_empty_environment_values_count_as_unset() -> None:
    assert settings([], dict.fromkeys(ENV, "")) == settings([])


def test_home_directory_is_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    assert settings(["--data-dir", "~/sb"]).data_dir == Path("/home/someone/sb")


@pytest.mark.parametrize(
    ("argv", "env", "fragment"),
    [
        (["--port", "99999"], {}, "invalid --port '99999'"),
        (["--port", "-1"], {}, "invalid --port"),
        (["--port", "http"], {}, "invalid --port 'http'"),
        ([], {"SBEMU_PORT": "5672x"}, "invalid SBEMU_PORT '5672x'"),
        (["--admin-port", "65536"], {}, "invalid --admin-port"),
        ([], {"SBEMU_ADMIN_PORT": "1e3"}, "invalid SBEMU_ADMIN_PORT"),
        (["--log-level", "loud"], {}, "invalid --log-level 'loud'"),
        ([], {"SBEMU_LOG_LEVEL": "trace"}, "invalid SBEMU_LOG_LEVEL"),
        (["--host", " "], {}, "invalid --host"),
    ],
)
def test_unusable_values(argv: list[str], env: dict[str, str], fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        settings(argv, env)


# ------------------------------------------------------------------------------------------------
# What serve prints
# ------------------------------------------------------------------------------------------------


def test_connection_string_omits_the_default_port() -> None:
    config = default_config()
    assert connection_string(config, DEFAULT_PORT) == (
        "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
    )
    assert connection_string(config, 40000).startswith("Endpoint=sb://localhost:40000;")


def test_connection_string_uses_first_namespace_first_policy() -> None:
    config = parse_config(
        {
            "UserConfig": {
                "Namespaces": [
                    {
                        "Name": "first-ns",
                        "SharedAccessPolicies": [
                            {"KeyName": "app", "Key": "s3cret", "Rights": ["Send", "Listen"]},
                            {"KeyName": "other", "Key": "x", "Rights": ["Manage"]},
                        ],
                    },
                    {"Name": "second-ns"},
                ]
            }
        },
        "mem",
    )
    assert connection_string(config, 5672) == (
        "Endpoint=sb://localhost;SharedAccessKeyName=app;SharedAccessKey=s3cret;"
        "UseDevelopmentEmulator=true;"
    )
    lines = ready_lines(config, "::1", 5672, 5300)
    assert (
        lines[0]
        == f"sbemu {__version__} listening on amqp://[::1]:5672 for namespace first-ns, second-ns"
    )
    assert lines[1] == "health on http://[::1]:5300/health"


def test_ready_lines() -> None:
    assert ready_lines(default_config(), "127.0.0.1", 5672, 5300) == [
        f"sbemu {__version__} listening on amqp://127.0.0.1:5672 for namespace sbemulatorns",
        "health on http://127.0.0.1:5300/health",
        "connection string: Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
        "dashboard on http://127.0.0.1:5300/ (Prometheus metrics on /metrics)",
    ]


# ------------------------------------------------------------------------------------------------
# main() in process
# ------------------------------------------------------------------------------------------------


def test_main_without_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "serve" in capsys.readouterr().err


def test_main_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"sbemu {__version__}"


def test_main_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_main_bad_setting_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--admin-port", "70000"]) == 2
    err = capsys.readouterr().err
    assert err == "sbemu: invalid --admin-port '70000': must be an integer from 0 to 65535\n"


def test_log_retention_records() -> None:
    assert settings([]).log_retention_records == 0
    assert settings([], {"SBEMU_LOG_RETENTION_RECORDS": "500"}).log_retention_records == 500
    assert (
        settings(
            ["--log-retention-records", "7"], {"SBEMU_LOG_RETENTION_RECORDS": "500"}
        ).log_retention_records
        == 7
    )
    with pytest.raises(UsageError, match="--log-retention-records"):
        settings(["--log-retention-records", "-1"])


def test_log_bodies() -> None:
    assert settings([]).log_bodies is False
    assert settings(["--log-bodies"]).log_bodies is True
    assert settings([], {"SBEMU_LOG_BODIES": "1"}).log_bodies is True
    assert settings([], {"SBEMU_LOG_BODIES": "false"}).log_bodies is False
    with pytest.raises(UsageError, match="SBEMU_LOG_BODIES"):
        settings([], {"SBEMU_LOG_BODIES": "maybe"})
