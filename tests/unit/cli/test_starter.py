"""`sbemu init` (the starter Config.json), Logging.Type File, and a data dir that is a file."""

from __future__ import annotations

import json
import logging

import pytest

from sbemu.cli import _log_targets, main
from sbemu.config import load_config


def test_init_writes_a_starter_config_that_loads(tmp_path, capsys):
    path = tmp_path / "Config.json"
    assert main(["init", str(path)]) == 0
    assert "sbemu serve --config" in capsys.readouterr().out
    config = load_config(path)
    (ns,) = config.namespaces
    queues = {q.name: q for q in ns.queues}
    assert not queues["orders"].partitioned and queues["orders.partitioned"].partitioned
    assert queues["chat.sessions"].requires_session
    assert queues["payments.dedup"].requires_duplicate_detection
    (topic,) = ns.topics
    kinds = {s.name: [r.filter_type for r in s.rules] for s in topic.subscriptions}
    assert kinds["eu-high-priority"] == ["sql"] and kinds["invoices"] == ["correlation"]


def test_init_never_overwrites_unasked(tmp_path, capsys):
    path = tmp_path / "Config.json"
    path.write_text("{}")
    assert main(["init", str(path)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert path.read_text() == "{}"
    assert main(["init", str(path), "--force"]) == 0
    assert "UserConfig" in json.loads(path.read_text())


def test_data_dir_that_is_a_file(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["serve", "--data-dir", str(afile), "--port", "0", "--admin-port", "0"]) == 2
    assert f"data dir {afile}: not a directory" in capsys.readouterr().err


@pytest.fixture
def clean_root_logger():
    root = logging.getLogger()
    saved = list(root.handlers)
    console = logging.StreamHandler()
    root.handlers = [console]
    yield console
    for h in root.handlers:
        if h not in saved:
            h.close()
    root.handlers = saved


def test_logging_type_file_writes_the_log_file(tmp_path, clean_root_logger):
    _log_targets("File", tmp_path)
    logging.getLogger("sbemu.test").warning("to the file")
    for h in logging.getLogger().handlers:
        h.flush()
    assert "to the file" in (tmp_path / "logs" / "sbemu.log").read_text()
    assert clean_root_logger.level == logging.WARNING  # File alone: console keeps warnings


def test_logging_type_console_file_keeps_console(tmp_path, clean_root_logger):
    _log_targets("Console,File", tmp_path)
    assert clean_root_logger.level == logging.NOTSET
    assert (tmp_path / "logs" / "sbemu.log").exists()


def test_logging_type_console_writes_no_file(tmp_path, clean_root_logger):
    _log_targets("Console", tmp_path)
    assert not (tmp_path / "logs").exists()


def _two_namespaces(port_a, port_b):
    from sbemu.config import parse_config

    def ns(name, port):
        out = {"Name": name, "Queues": [], "Topics": []}
        if port is not None:
            out["AmqpPort"] = port
        return out

    doc = {"UserConfig": {"Namespaces": [ns("firstns", port_a), ns("otherns", port_b)]}}
    return parse_config(doc, "test.json")


def test_amqp_port_per_namespace():
    config = _two_namespaces(None, 5673)
    assert [n.amqp_port for n in config.namespaces] == [None, 5673]
    assert _two_namespaces(0, 0).namespaces[1].amqp_port == 0  # any free port, twice is fine


@pytest.mark.parametrize(
    "ports,message", [((5673, 5673), "already the AmqpPort"), ((None, 70000), "out of range")]
)
def test_amqp_port_refused(ports, message):
    from sbemu.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        _two_namespaces(*ports)
