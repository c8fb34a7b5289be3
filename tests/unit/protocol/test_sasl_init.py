"""SASL init frames of the wrong shape are the peer's error (found by fuzzing, seed 7)."""

from __future__ import annotations

import pytest

from sbemu.protocol import codec
from sbemu.protocol.sasl import SASL_HEADER, SASL_INIT, SaslError, SaslServer, _frame


@pytest.mark.parametrize(
    "body", [codec.enc_double(1.5), codec.enc_string("PLAIN"), codec.enc_uint(7)]
)
def test_a_sasl_init_that_is_not_a_list_is_a_sasl_error(body: bytes) -> None:
    server = SaslServer(lambda host, user, password: True)
    server.receive(SASL_HEADER)
    with pytest.raises(SaslError, match="sasl-init is not a list"):
        server.receive(_frame(codec.enc_described(SASL_INIT, body)))


def test_a_well_formed_sasl_init_still_completes() -> None:
    server = SaslServer(lambda host, user, password: True)
    server.receive(SASL_HEADER)
    server.receive(
        _frame(codec.enc_described(SASL_INIT, codec.enc_list([codec.enc_symbol("ANONYMOUS")])))
    )
    assert server.result is not None and server.result.mechanism == "ANONYMOUS"
