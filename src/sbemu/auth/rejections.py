"""Rejected credentials, logged at warning level and rate-limited (shared by `$cbs`/SASL and the
admin port, so neither imports the other).

An SDK shows a refused token as a bare ``amqp:client-error`` or ``401``; the operator finds why
in sbemu's output: one warning line per rejection with the key name, the reason and the peer.
A client retrying a wrong key in a tight loop must not flood the log, so each source logs at
most ``burst`` lines per ``window`` seconds; what was held back is counted and reported in one
line when the next window opens.

Pure apart from logging: the caller passes ``now`` (Unix seconds).
"""

from __future__ import annotations

import logging

__all__ = ["LogThrottle", "RejectionLog"]

BURST = 10  # lines per window
WINDOW = 60.0  # seconds


class LogThrottle:
    """At most ``burst`` lines per ``window`` seconds for a line a peer can provoke at will (a
    refused token, a `$cbs` request with no reply link, ...); the rest are counted and reported
    in one line (``prefix``, then the count and ``what``) when the next window opens."""

    def __init__(
        self,
        what: str,
        logger: logging.Logger,
        *,
        level: int = logging.INFO,
        burst: int = BURST,
        window: float = WINDOW,
        prefix: str = "",
    ) -> None:
        self.what = what  # names the held-back lines in the summary
        self.prefix = prefix
        self._log = logger
        self.level = level
        self.burst = burst
        self.window = window
        self._window_start = float("-inf")
        self._logged = 0
        self.suppressed = 0  # held back in the current window

    def log(self, now: float, msg: str, *args: object) -> bool:
        """Log one line (True) unless this window's burst is spent (False, counted)."""
        if now - self._window_start >= self.window:
            if self.suppressed:
                self._log.log(
                    self.level,
                    "%s%d more %s were not logged in the last %.0f s",
                    self.prefix,
                    self.suppressed,
                    self.what,
                    self.window,
                )
            self._window_start, self._logged, self.suppressed = now, 0, 0
        if self._logged >= self.burst:
            self.suppressed += 1
            return False
        self._logged += 1
        self._log.log(self.level, msg, *args)
        return True


class RejectionLog:
    """Rate-limited warnings about refused credentials for one source ("AMQP", "admin")."""

    def __init__(
        self,
        source: str,
        logger: logging.Logger,
        *,
        burst: int = BURST,
        window: float = WINDOW,
    ) -> None:
        self.source = source
        self._throttle = LogThrottle(
            "rejected credentials or unknown entities",
            logger,
            level=logging.WARNING,
            burst=burst,
            window=window,
            prefix=f"{source}: ",
        )

    @property
    def burst(self) -> int:
        return self._throttle.burst

    @property
    def suppressed(self) -> int:
        """Lines held back in the current window."""
        return self._throttle.suppressed

    def rejected(self, key_name: str | None, reason: str, peer: str, now: float) -> bool:
        """Log one rejection (True) unless this window's burst is spent (False, counted)."""
        return self._throttle.log(
            now,
            "%s: rejected credentials from %s (key name %s): %s",
            self.source,
            _short(peer or "?", 60),
            _short(repr(key_name), 80) if key_name else "none",
            _short(reason),
        )

    def entity_not_found(self, path: str, peer: str, now: float) -> bool:
        """Log a token asked for an entity that does not exist (True), in the same rate
        limit as the rejections: the credentials may be right, the name is not."""
        return self._throttle.log(
            now,
            "%s: entity not found: %s asked for '%s', which no queue, topic or subscription of "
            "the namespace is; check the name, or create it (configuration or admin API)",
            self.source,
            _short(peer or "?", 60),
            _short(path, 200),
        )


def _short(text: str, limit: int = 300) -> str:
    """A reason as one bounded line (a token or key name can be megabytes of anything)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
