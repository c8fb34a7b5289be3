"""The web dashboard on the admin port: pages, JSON API, live events (SSE) and /metrics.

What belongs here: turning the router's state into JSON for the page (shipped as package data in
admin/static/, no build step, no CDN), the rate history the live charts draw, and the dashboard's
actions (partition on/offline, test send, resubmit, purge, close connection) as POSTs guarded by
admin/access.py. What does not: sockets (admin/http/), message decoding and sending
(admin/explorer.py, over the same code paths as AMQP), counters (partitions/stats.py), the
snapshot rows of one entity (admin/entityrows.py), what it reads of the server
(admin/serverstatus.py, re-exported here).

The rooms: ``web`` (the routes, pages, JSON reads and live events), ``data`` (the snapshot, the
overview, one entity's detail and the rate history, cached), ``actions`` (the POSTs) and
``scrape`` (the /metrics families).
"""

from ..serverstatus import Connection as Connection
from ..serverstatus import ServerStatus as ServerStatus
from ..serverstatus import Services as Services
from .data import RateHistory
from .web import Dashboard

__all__ = ["Connection", "Dashboard", "RateHistory", "ServerStatus", "Services"]
