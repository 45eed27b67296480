"""A plain tcp:// address that reaches no scheduler names the tls:// fix (a plain client
against a TLS scheduler fails like an unreachable one)."""

from __future__ import annotations

import socket

import pytest

from nightly.cluster.dispatch import connect
from nightly.errors import NightlyError


def test_a_tcp_address_that_fails_names_tls() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(NightlyError) as info:
        connect(f"tcp://127.0.0.1:{port}", 2.0)
    assert "the address is tls://, not tcp://" in str(info.value)
