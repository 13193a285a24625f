"""Escape suite, egress: one plain-HTTP request per proxy connection, decided and framed exactly.

Driven from inside a real session on each backend (bwrap and docker), through the bridge, as the
escape suite does for egress. What reached the upstream is read from the upstream's raw recorder
(tests/fixtures/upstream.py, port 8081), which keeps every byte a connection sent without parsing
it — so a second request relayed behind the first shows up there even if no server would act on
it. Smuggling forms are shown refused before anything is dialled.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox.egress.framing import BodyFramer, FramingError, body_framer
from sandbox.types import (
    Backend,
    ConnectionReport,
    ExecRequest,
    NetworkPolicy,
    Session,
    SessionSpec,
)
from tests.fixtures.upstream import RAW_PORT, FakeDNS, Upstream

pytestmark = pytest.mark.slow

ALLOWED = "api.allowed.test"

# For each connection: send each phase's bytes, read one HTTP answer after each (head, then a
# Content-Length body), then read to the end. Prints, per connection, the answers as text: "" when
# the connection was closed instead of answered, "send:<error>"/"recv:<error>" on a socket error.
PROBE = r"""
import json, socket, sys

def read_answer(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body

out = []
for phases in json.loads(sys.stdin.read()):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    answers = []
    try:
        for raw in phases:
            try:
                s.sendall(raw.encode("latin-1"))
            except OSError as exc:
                answers.append("send:" + type(exc).__name__)
                break
            try:
                answer = read_answer(s)
            except OSError as exc:
                answers.append("recv:" + type(exc).__name__)
                break
            answers.append(answer.decode("latin-1"))
            if not answer:
                break
        else:
            rest = b""
            try:
                while chunk := s.recv(4096):
                    rest += chunk
            except OSError as exc:
                rest = ("recv:" + type(exc).__name__).encode()
            answers.append(rest.decode("latin-1"))
    finally:
        s.close()
    out.append(answers)
print(json.dumps(out))
"""

UPSTREAM_ANSWER = (
    "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nraw\n"  # as relayed
)


@dataclass
class Net:
    session: Session
    dns: FakeDNS
    reports: list[ConnectionReport]
    upstream: Upstream

    def send(self, *connections: list[str]) -> list[list[str]]:
        result = self.session.exec(
            ExecRequest(
                argv=["python3", "-c", PROBE],
                stdin=json.dumps(list(connections)).encode(),
                timeout_s=60,
            )
        )
        assert result.exit_code == 0, result.stderr.decode(errors="replace")
        answers = json.loads(result.stdout)
        assert isinstance(answers, list)
        return answers

    def recorded(self, needle: str, expected: int = 1) -> list[bytes]:
        """What the raw recorder kept for connections mentioning `needle` (a connection is
        recorded when it ends: waits up to 5 s for `expected` of them)."""
        deadline = time.monotonic() + 5.0
        while True:
            found = self.upstream.raw_received(needle)
            if len(found) >= expected or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def wait_reports(self, expected: int) -> list[ConnectionReport]:
        deadline = time.monotonic() + 10.0
        while len(self.reports) < expected and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # and nothing more arrives
        return list(self.reports)


@pytest.fixture
def net(backend_name: str, upstream: Upstream, tmp_path: Path) -> Iterator[Net]:
    """A session allowed api.allowed.test on the raw recorder's port; evil.test resolves to the
    upstream too, so only the proxy's decision keeps a request for it away."""
    dns = upstream.resolver(names=(ALLOWED,), extra={"evil.test": upstream.ip})
    reports: list[ConnectionReport] = []
    workspace = tmp_path / "pipelining-ws"
    workspace.mkdir()
    backend: Backend
    if backend_name == "bwrap":
        from sandbox.backends.bwrap import BwrapBackend

        backend = BwrapBackend(egress_resolver=dns)
    else:
        from sandbox.backends.docker import DockerBackend

        backend = DockerBackend(egress_resolver=dns)
    session = backend.open(
        SessionSpec(
            workspace=workspace,
            network=NetworkPolicy(allowed_domains=(ALLOWED,), allowed_ports=(RAW_PORT,)),
            on_connection=reports.append,
        )
    )
    try:
        yield Net(session=session, dns=dns, reports=reports, upstream=upstream)
    finally:
        session.close()


def canary() -> str:
    return "c" + os.urandom(6).hex()


def forwarded_head(path: str, *extra: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {ALLOWED}:{RAW_PORT}", *extra, "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_pipelined_second_request_is_dropped_not_relayed(net: Net) -> None:
    # given two requests in one write: one allowed, one for a host that is not
    mark = canary()
    first = f"GET http://{ALLOWED}:{RAW_PORT}/first-{mark} HTTP/1.1\r\nHost: {ALLOWED}\r\n\r\n"
    second = f"GET http://evil.test:{RAW_PORT}/second-{mark} HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    # when the sandbox sends them on one connection
    [answers] = net.send([first + second])
    # then the first is answered (the client is told the connection closes), the second never is
    assert answers == [UPSTREAM_ANSWER, ""]
    # and the upstream received exactly the first request, nothing after it
    assert net.recorded(mark) == [forwarded_head(f"/first-{mark}")]
    # and only the first destination was looked up and reported
    assert net.dns.calls == [(ALLOWED, RAW_PORT)]
    [report] = net.wait_reports(1)
    assert (report.host, report.port, report.verdict) == (ALLOWED, RAW_PORT, "allowed")


def test_keep_alive_reuse_with_a_new_host_is_not_relayed(net: Net) -> None:
    # given an answered keep-alive request to the allowed host
    mark = canary()
    first = (
        f"GET http://{ALLOWED}:{RAW_PORT}/first-{mark} HTTP/1.1\r\n"
        f"Host: {ALLOWED}\r\nConnection: keep-alive\r\n\r\n"
    )
    second = f"GET http://evil.test:{RAW_PORT}/second-{mark} HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    # when the sandbox reuses the connection for another host after reading the answer
    [answers] = net.send([first, second])
    # then the second request gets no answer: the connection ends
    assert answers[0] == UPSTREAM_ANSWER
    assert answers[1] in {"", "send:BrokenPipeError", "recv:ConnectionResetError"}
    # and the upstream saw the first request only, and one connection was reported
    assert net.recorded(mark) == [forwarded_head(f"/first-{mark}")]
    assert [(r.host, r.verdict) for r in net.wait_reports(1)] == [(ALLOWED, "allowed")]


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        ("Content-Length: 5", "hello"),
        ("Transfer-Encoding: chunked", "5\r\nhello\r\n3;ext=1\r\n!!!\r\n0\r\nX-T: 1\r\n\r\n"),
    ],
    ids=["content-length", "chunked"],
)
def test_a_request_smuggled_after_a_framed_body_is_dropped(
    net: Net, framing: str, body: str
) -> None:
    # given a POST whose body is followed by a smuggled request
    mark = canary()
    head = (
        f"POST http://{ALLOWED}:{RAW_PORT}/post-{mark} HTTP/1.1\r\nHost: {ALLOWED}\r\n"
        f"{framing}\r\n\r\n"
    )
    smuggled = f"GET http://evil.test:{RAW_PORT}/smuggled-{mark} HTTP/1.1\r\nHost: e\r\n\r\n"
    # when it is sent in one write
    [answers] = net.send([head + body + smuggled])
    # then the upstream got the head and exactly the announced body, nothing after it
    assert answers == [UPSTREAM_ANSWER, ""]
    expected = (
        f"POST /post-{mark} HTTP/1.1\r\nHost: {ALLOWED}:{RAW_PORT}\r\n{framing}\r\n"
        f"Connection: close\r\n\r\n{body}"
    ).encode()
    assert net.recorded(mark) == [expected]


SMUGGLING_FORMS = {
    "cl-and-te": "Content-Length: 4\r\nTransfer-Encoding: chunked",
    "te-and-cl": "Transfer-Encoding: chunked\r\nContent-Length: 4",
    "duplicate-cl-same": "Content-Length: 4\r\nContent-Length: 4",
    "duplicate-cl-differing": "Content-Length: 4\r\nContent-Length: 40",
    "cl-list": "Content-Length: 4, 4",
    "cl-signed": "Content-Length: +4",
    "cl-hex": "Content-Length: 0x4",
    "te-list": "Transfer-Encoding: chunked, identity",
    "te-unknown": "Transfer-Encoding: xchunked",
    "te-twice": "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
    "obs-fold-te": "Transfer-Encoding:\r\n chunked",
    "obs-fold-cl": "X-A: 1\r\n\tContent-Length: 4",
    "space-before-colon": "Content-Length : 4",
}


def test_request_smuggling_forms_are_refused_before_anything_is_dialled(net: Net) -> None:
    # given one request per ambiguous framing form, each with a unique path
    mark = canary()
    requests = [
        [
            f"POST http://{ALLOWED}:{RAW_PORT}/{name}-{mark} HTTP/1.1\r\nHost: {ALLOWED}\r\n"
            f"{form}\r\n\r\n0\r\n\r\n"
        ]
        for name, form in SMUGGLING_FORMS.items()
    ]
    # when the sandbox sends each on its own connection
    answers = net.send(*requests)
    # then every one is refused with 400 naming the bad request, nothing is looked up or dialled
    statuses = [answer[0].split(" ", 2)[1] if answer[0] else "" for answer in answers]
    assert statuses == ["400"] * len(SMUGGLING_FORMS)
    assert all("X-Motor-Egress: error; reason=bad_request" in answer[0] for answer in answers)
    assert net.dns.calls == []
    assert net.recorded(mark, expected=0) == []
    reports = net.wait_reports(len(SMUGGLING_FORMS))
    assert [(r.verdict, r.reason, r.resolved_ip) for r in reports] == [
        ("denied", "bad_request", None)
    ] * len(SMUGGLING_FORMS)


# ------------------------------------------------------------------ the framer on its own


def feed_all(framer: BodyFramer, data: bytes, step: int) -> bytes:
    out = b""
    for i in range(0, len(data), step):
        out += framer.feed(data[i : i + step])
    return out


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_the_chunked_framer_finds_the_end_however_the_bytes_arrive(step: int) -> None:
    # given a chunked body with an extension and a trailer, followed by another request
    body = b"5\r\nhello\r\nA;x=y\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"
    framer = body_framer([("Transfer-Encoding", "Chunked")])
    # when it is fed in pieces of `step` bytes
    after = b"GET http://evil.test/ HTTP/1.1\r\n\r\n"
    kept = feed_all(framer, body + after, step)
    # then exactly the body is kept and the rest counted as dropped
    assert (kept, framer.done, framer.dropped) == (body, True, len(after))


@pytest.mark.parametrize(
    "body",
    [b"5\nhello\r\n0\r\n\r\n", b"5\r\nhello!\r\n0\r\n\r\n", b"-5\r\n", b"5 5\r\n", b"0\r\nbad\r\n"],
    ids=["bare-lf", "long-chunk", "negative", "two-sizes", "bad-trailer"],
)
def test_malformed_chunked_framing_raises(body: bytes) -> None:
    framer = body_framer([("Transfer-Encoding", "chunked")])
    with pytest.raises(FramingError):
        framer.feed(body)


def test_a_request_without_framing_headers_has_no_body() -> None:
    framer = body_framer([("Host", "a")])
    assert (framer.done, framer.feed(b"GET / HTTP/1.1\r\n\r\n"), framer.dropped) == (True, b"", 18)
