"""The admin port's HTTP/1.1 server: h11 (sans-IO) parsing, keep-alive, bodies, TLS on the same port.

What belongs here: the admin side's only socket code. It reads requests defensively, hands each
to the route table (sbemu.admin.routes) as a :class:`Request`, and writes the :class:`Response`
(``Content-Length`` bodies, or a chunked ``stream`` such as server-sent events). What does not:
the routes themselves (server, Atom API, dashboard), which never see sockets.

One port serves both plain HTTP (``/health``, curl, the .NET admin client) and HTTPS (the Python
and JS admin clients always speak TLS): a connection whose first byte is ``0x16`` (a TLS
handshake record) is wrapped with the server's ``ssl.SSLContext`` through ``ssl.MemoryBIO``.

Guards: each header line is capped at 8 KiB and the head at 100 header lines (431), bodies at
``max_body`` bytes (413); the head and body of a request must arrive within ``request_timeout``
seconds (408), an idle keep-alive connection is closed after ``KEEP_ALIVE_TIMEOUT``; anything h11
refuses, methods that are not upper-case tokens and versions other than HTTP/1.0 and 1.1 get 400;
no route gives 404 (405 with ``Allow`` when the path exists for other methods). A route that raises
gives 500 and is logged; the listener keeps serving.
"""

from .messages import Dispatcher, Handler, Request, Response, json_response, text_response
from .server import LISTEN_BACKLOG, AdminServer, HttpService, start_admin
from .transports import UpgradedStream

__all__ = [
    "AdminServer",
    "Dispatcher",
    "Handler",
    "HttpService",
    "Request",
    "Response",
    "json_response",
    "start_admin",
    "LISTEN_BACKLOG",
    "text_response",
    "UpgradedStream",
]
