"""Admin HTTP port: health, partitions, purge, the Service Bus Atom management API."""

from sbemu.admin.http import (
    AdminServer,
    Handler,
    Request,
    Response,
    json_response,
    start_admin,
    text_response,
)
from sbemu.admin.routes import HttpRoutes

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
