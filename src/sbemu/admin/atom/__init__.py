"""The Service Bus management REST API (Atom/XML) that every SDK's administration client speaks.

Paths (all with ``?api-version=...``): ``/{entity}`` GET/PUT/DELETE (queue or topic; PUT with
``If-Match: *`` updates, without it creates), ``/{topic}/Subscriptions/{sub}`` and
``/{topic}/Subscriptions/{sub}/Rules/{rule}`` likewise, lists at ``/$Resources/Queues``,
``/$Resources/Topics``, ``/{topic}/Subscriptions``, ``/{topic}/Subscriptions/{sub}/Rules``
(``$skip``/``$top``, a ``rel="next"`` link while more remain) and ``/$namespaceinfo``.
Descriptions carry the SDK models' elements (QueueDescription, TopicDescription,
SubscriptionDescription, RuleDescription, NamespaceInfo) with runtime counts summed over every
partition [P17, P18]; a partitioned entity reports MaxSizeInMegabytes x partitions [P5].

Like Azure: a GET of a missing entity answers 200 with an empty feed (the SDKs turn it into
not-found), errors are ``<Error><Code>..</Code><Detail>..</Detail></Error>`` with 400, 401,
403 (quota), 404, 409 or 503 (a partition is out of service). Every request needs a SAS token
in ``Authorization`` (verified like ``$cbs`` tokens, by the admin port's access policy:
sbemu.admin.policy); writes need Manage.
"""

from .api import add_atom_routes
from .render import duration_text, empty_feed

__all__ = ["add_atom_routes", "duration_text", "empty_feed"]
