"""Reading the SNI from a real ClientHello (made by the ssl module), whole, cut and re-framed."""

from __future__ import annotations

import ssl

import pytest

from sandbox.egress.sni import HelloScan, scan_client_hello


def client_hello(server_hostname: str | None) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = server_hostname is not None
    if server_hostname is None:
        context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_the_server_name_is_read_from_a_whole_client_hello() -> None:
    # when
    scan = scan_client_hello(client_hello("api.allowed.test"))

    # then
    assert scan == HelloScan(complete=True, is_tls=True, server_name="api.allowed.test")


def test_a_client_hello_without_sni_has_no_name() -> None:
    assert scan_client_hello(client_hello(None)) == HelloScan(complete=True, is_tls=True)


def test_every_cut_short_prefix_asks_for_more_bytes() -> None:
    # given
    hello = client_hello("api.allowed.test")

    # when / then
    for cut in range(1, len(hello)):
        assert scan_client_hello(hello[:cut]).complete is False, cut


def test_a_client_hello_split_over_two_records_is_reassembled() -> None:
    # given the handshake message re-framed into two TLS records
    hello = client_hello("api.allowed.test")
    handshake = hello[5:]
    half = len(handshake) // 2

    def record(payload: bytes) -> bytes:
        return hello[:3] + len(payload).to_bytes(2, "big") + payload

    # when
    scan = scan_client_hello(record(handshake[:half]) + record(handshake[half:]))

    # then
    assert scan.server_name == "api.allowed.test"


def test_non_tls_bytes_are_recognised_as_such() -> None:
    assert scan_client_hello(b"GET / HTTP/1.1\r\n") == HelloScan(complete=True, is_tls=False)


def test_a_malformed_client_hello_is_an_error_not_a_crash() -> None:
    # given a handshake record whose ClientHello body is garbage of the announced length
    body = b"\x03\x03" + b"\x00" * 32 + b"\xff"
    handshake = b"\x01" + len(body).to_bytes(3, "big") + body
    data = b"\x16\x03\x01" + len(handshake).to_bytes(2, "big") + handshake

    # when
    scan = scan_client_hello(data)

    # then
    assert scan.complete is True and scan.is_tls is True
    assert scan.error is not None and scan.error.startswith("malformed ClientHello")
