"""Request/reply links for AmqpConnection: $cbs put-token, $management and the other request
nodes, and the reply links their answers go out on. A mixin of AmqpConnection (connection.py
keeps the state machine and the event loop)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from proton import (
    Delivery,
    Link,
    Message,
)

from ..sas import token_key_name
from . import cbs
from .links import (
    LinkState,
    ReplyLink,
    RequestLink,
)
from .management import handle_request
from .services import NamespaceInfo, Services

log = logging.getLogger("sbemu.connection")


class RequestLinks:
    """The part of AmqpConnection this module owns (see the module docstring)."""

    if TYPE_CHECKING:  # what it uses of AmqpConnection
        _grants: cbs.Grants
        _links: dict[Link, LinkState]
        _tag_counter: itertools.count[int]
        id: int
        namespace: NamespaceInfo
        now: float
        on_output: Callable[[], None]

        @property
        def now_ms(self) -> int: ...

        peer: str
        services: Services

    def _on_request(self, state: RequestLink, delivery: Delivery, data: bytes) -> None:
        if not delivery.settled:
            delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        request = Message()
        try:
            request.decode(data)
        except Exception as exc:
            log.info("connection %d: undecodable request on %s: %s", self.id, state.node, exc)
            return
        if state.node == "$cbs":
            self._on_put_token(state, request)
        else:
            handle_request(self, state, request)

    def _check_plain(self, hostname: str | None, username: str, password: str) -> bool:
        """SASL PLAIN (key name, key); a refusal is logged (rate-limited) with the peer."""
        if self.services.check_plain(hostname, username, password):
            return True
        ns = self.services.namespace_for(hostname)
        why = "wrong key" if username in ns.keys else f"no such key name in namespace {ns.name}"
        self.services.rejections.rejected(username, f"SASL PLAIN: {why}", self.peer, self.now)
        return False

    def _on_put_token(self, state: RequestLink, request: Message) -> None:
        props: dict[Any, Any] = request.properties or {}
        ns, services = self.namespace.name, self.services
        status, description, grant = cbs.put_token(
            props,
            request.body,
            self.namespace.keys,
            self.now,
            entity_of=lambda path: services.entity_name(ns, path),
            rules_of=lambda entity: services.entity_rules(ns, entity),
        )
        if grant is not None:
            self._grants.add(grant, self.now)
        elif status == 404:  # the key may be right: the audience names no entity
            audience = props.get("name")
            self.services.rejections.entity_not_found(str(audience), self.peer, self.now)
        else:
            self.services.rejections.rejected(
                token_key_name(request.body),
                f"$cbs put-token: {description}",
                self.peer,
                self.now,
            )
        from proton import int32

        response = Message(
            correlation_id=request.id,
            properties={"status-code": int32(status), "status-description": description},
            body=None,
        )
        self.send_reply(state, request, response)

    def send_reply(self, state: RequestLink, request: Message, response: Message) -> None:
        """Route a response to the client's reply link in this connection [contract 6.1]."""
        reply = self._find_reply_link(state, request.reply_to)
        if reply is None:
            log.info("connection %d: no reply link for %s", self.id, state.node)
            return
        reply.pending.append(response.encode())
        self._flush_replies(reply)
        self.on_output()

    def _find_reply_link(self, state: RequestLink, reply_to: str | None) -> ReplyLink | None:
        candidates = [s for s in self._links.values() if isinstance(s, ReplyLink)]
        if reply_to:
            matches = [s for s in candidates if (s.link.remote_target.address or "") == reply_to]
            if len(matches) == 1:
                return matches[0]
            if matches:
                candidates = matches
        same_node = [s for s in candidates if s.node == state.node]
        same_session = [s for s in same_node if s.link.session == state.link.session]
        for group in (same_session, same_node):
            if group:
                return group[0]
        return None

    def _flush_replies(self, reply: ReplyLink) -> None:
        link = reply.link
        while reply.pending and link.credit > 0:
            data = reply.pending.popleft()
            tag = next(self._tag_counter).to_bytes(8, "big")
            delivery = link.delivery(tag)  # type: ignore[arg-type]  # proton takes bytes tags; stub says str
            link.send(data)
            link.advance()
            delivery.settle()
