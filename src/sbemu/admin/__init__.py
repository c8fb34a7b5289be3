"""Admin HTTP port: health, partitions, purge, the Service Bus Atom management API."""

from sbemu.admin.http import (
    AdminServer,
    Handler,
    HttpRoutes,
    Request,
    Response,
    json_response,
    start_admin,
    text_response,
)

__all__ = [
    "AdminServer",
    "Handler",
    "HttpRoutes",
    "Request",
    "Response",
    "json_response",
    "start_admin",
    "text_response",
]
