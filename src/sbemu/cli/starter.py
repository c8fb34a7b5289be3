"""`sbemu init`: a starter Config.json with one entity of each kind, in Microsoft's emulator
schema plus sbemu's EnablePartitioning, for the walk-through of docs/getting-started.md."""

from __future__ import annotations

import json
from typing import Any

DEFAULT_PATH = "Config.json"


def _queue(name: str, **props: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "DeadLetteringOnMessageExpiration": False,
        "DefaultMessageTimeToLive": "PT1H",
        "DuplicateDetectionHistoryTimeWindow": "PT20S",
        "ForwardDeadLetteredMessagesTo": "",
        "ForwardTo": "",
        "LockDuration": "PT1M",
        "MaxDeliveryCount": 3,
        "RequiresDuplicateDetection": False,
        "RequiresSession": False,
    }
    base.update(props)
    return {"Name": name, "Properties": base}


def _subscription(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "Name": name,
        "Properties": {
            "DeadLetteringOnMessageExpiration": False,
            "DefaultMessageTimeToLive": "PT1H",
            "LockDuration": "PT1M",
            "MaxDeliveryCount": 3,
            "ForwardDeadLetteredMessagesTo": "",
            "ForwardTo": "",
            "RequiresSession": False,
        },
        "Rules": rules,
    }


def starter_config() -> dict[str, Any]:
    """The document `sbemu init` writes."""
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [
                        _queue("orders"),
                        _queue("orders.partitioned", EnablePartitioning=True),
                        _queue("chat.sessions", RequiresSession=True),
                        _queue("payments.dedup", RequiresDuplicateDetection=True),
                    ],
                    "Topics": [
                        {
                            "Name": "events",
                            "Properties": {
                                "DefaultMessageTimeToLive": "PT1H",
                                "DuplicateDetectionHistoryTimeWindow": "PT20S",
                                "RequiresDuplicateDetection": False,
                            },
                            "Subscriptions": [
                                _subscription("everything", []),
                                _subscription(
                                    "eu-high-priority",
                                    [
                                        {
                                            "Name": "eu-high",
                                            "Properties": {
                                                "FilterType": "Sql",
                                                "SqlFilter": {
                                                    "SqlExpression": "region = 'eu' AND priority > 5"
                                                },
                                                "Action": {"SqlExpression": "SET routed = 'eu'"},
                                            },
                                        }
                                    ],
                                ),
                                _subscription(
                                    "invoices",
                                    [
                                        {
                                            "Name": "invoice-created",
                                            "Properties": {
                                                "FilterType": "Correlation",
                                                "CorrelationFilter": {
                                                    "Label": "invoice.created",
                                                    "Properties": {"tenant": "contoso"},
                                                },
                                            },
                                        }
                                    ],
                                ),
                            ],
                        }
                    ],
                }
            ],
            "Logging": {"Type": "Console"},
        }
    }


def starter_text() -> str:
    return json.dumps(starter_config(), indent=2) + "\n"
