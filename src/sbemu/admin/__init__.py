"""Admin HTTP port: health today, the management (ATOM) API later."""

from sbemu.admin.http import Route, RouteResult, start_admin

__all__ = ["Route", "RouteResult", "start_admin"]
