"""The lean HTTP transport under the LLM client (runs/llm_http.py), against real local servers:
plain HTTP and TLS (a self-signed certificate made here), keep-alive, servers that close
connections, chunked and gzip answers, retries, timeouts, many threads, and proxies.
"""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from runs.errors import LLMUnavailable
from runs.llm import chat_completion_body, llm_chat, llm_client, report_sent
from runs.llm_http import LeanTransport

MESSAGES = [{"role": "user", "content": "hello"}]


@dataclass
class Answer:
    """What the server does with one request."""

    status: int = 200
    content: str = "ok"
    chunked: bool = False
    gzip: bool = False
    close_after: bool = False  # close the connection after answering, without saying so
    drop: bool = False  # read the request, then close without answering
    partial: bool = False  # send half a status line, then close
    hold: float = 0.0  # seconds to wait before answering
    connection_close: bool = False  # say `Connection: close`, then close
    unsized: bool = False  # no Content-Length: the body ends when the connection closes


@dataclass
class Server:
    """A threaded HTTP/1.1 server; `plan(index, body)` decides each answer."""

    plan: Callable[[int, dict[str, Any]], Answer] = lambda index, body: Answer()
    tls: ssl.SSLContext | None = None
    accepts: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Server:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with lock:
                    index = len(server.requests)
                    server.requests.append(body)
                    server.targets.append(self.path)
                answer = server.plan(index, body)
                if answer.drop:
                    self.close_connection = True
                    return
                if answer.partial:
                    self.wfile.write(b"HTTP/1.1 20")
                    self.close_connection = True
                    return
                if answer.hold:
                    server.released.wait(answer.hold)
                data = json.dumps(
                    chat_completion_body(content=answer.content, model="served")
                    if answer.status == 200
                    else {"error": {"message": "failing", "type": "test"}}
                ).encode()
                if answer.gzip:
                    data = gzip.compress(data)
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                if answer.gzip:
                    self.send_header("Content-Encoding", "gzip")
                if answer.connection_close:
                    self.send_header("Connection", "close")
                if answer.unsized:
                    self.end_headers()
                    self.wfile.write(data)
                    self.close_connection = True
                elif answer.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for start in range(0, len(data), 50):
                        piece = data[start : start + 50]
                        self.wfile.write(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\nX-Trailer: t\r\n\r\n")
                else:
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                self.wfile.flush()
                if answer.close_after:
                    self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return

        lock = threading.Lock()

        class Listener(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, address = super().get_request()
                with lock:
                    server.accepts += 1
                if server.tls is not None:
                    sock = server.tls.wrap_socket(sock, server_side=True)
                return sock, address

        self._listener = Listener(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._listener.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def base_url(self) -> str:
        port = self._listener.server_address[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}/v1"

    def stop(self) -> None:
        self.released.set()
        self._listener.shutdown()
        self._listener.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(**kwargs: Any) -> Server:
        server = Server(**kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def llm_settings(settings):
    settings.LLM_MOTOR_MODEL = "m"
    settings.LLM_API_KEY = "k"
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_TIMEOUT_SECONDS = 20
    return settings


def _chat(client: openai.OpenAI, content: str = "hello") -> str:
    return llm_chat(client=client, messages=[{"role": "user", "content": content}]).content


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key (PEM files)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llm test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_files(tmp_path) -> tuple[Path, ssl.SSLContext]:
    cert_path, key_path = _certificate(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    return cert_path, context


def test_llm_client_keeps_one_connection_for_many_calls(llm_settings, serve):
    # given a server and the settings' client
    server = serve(plan=lambda index, body: Answer(content=f"answer {index}"))
    llm_settings.LLM_BASE_URL = server.base_url
    client = llm_client()
    assert isinstance(client._client._transport, LeanTransport)
    # when 20 calls are made in a row, then each gets its own answer over one TCP connection
    assert [_chat(client) for _ in range(20)] == [f"answer {i}" for i in range(20)]
    assert server.accepts == 1
    assert len(server.requests) == 20
    # and the request carried the client's own headers and path
    assert server.targets == ["/v1/chat/completions"] * 20


def test_the_request_write_is_reported_to_on_sent_before_the_answer(llm_settings, serve):
    # given a server that holds its answer
    server = serve(plan=lambda index, body: Answer(content="late", hold=30))
    llm_settings.LLM_BASE_URL = server.base_url
    sent: list[int] = []
    result: dict[str, str] = {}

    def call() -> None:
        result["content"] = llm_chat(
            client=llm_client(), messages=MESSAGES, on_sent=lambda: sent.append(1)
        ).content

    thread = threading.Thread(target=call)
    thread.start()
    try:
        # when the request has gone out, then on_sent has run while the answer is held
        deadline = time.monotonic() + 10
        while not sent and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sent == [1] and "content" not in result
    finally:
        server.released.set()
        thread.join(timeout=30)
    assert result == {"content": "late"}
    assert sent == [1]


def test_a_connection_the_server_closed_while_idle_is_replaced(llm_settings, serve):
    # given a server that closes every connection after answering, without saying so
    server = serve(plan=lambda index, body: Answer(content=f"answer {index}", close_after=True))
    llm_settings.LLM_BASE_URL = server.base_url
    client = llm_client()
    assert _chat(client) == "answer 0"
    time.sleep(0.2)  # the server's close has reached the client
    # when the next calls are made, then each succeeds on a new connection, sent once
    assert _chat(client) == "answer 1"
    assert _chat(client) == "answer 2"
    assert server.accepts == 3
    assert len(server.requests) == 3


def test_a_reused_connection_dropped_under_the_request_is_retried_once(llm_settings, serve):
    # given a server that answers once, then drops the next request on that same connection
    # without a byte of answer (as a server closing an idle connection the moment it arrives)
    server = serve(plan=lambda index, body: Answer(content=f"answer {index}", drop=index == 1))
    llm_settings.LLM_BASE_URL = server.base_url
    client = llm_client()  # the client's own retries are off (LLM_MAX_RETRIES=0)
    assert _chat(client) == "answer 0"
    # when the next call is made, then it is sent again on a fresh connection and succeeds
    assert _chat(client) == "answer 2"
    assert server.accepts == 2
    assert len(server.requests) == 3


def test_a_fresh_connection_dropped_under_the_request_is_not_retried(llm_settings, serve):
    # given a server that drops the first request of each connection
    server = serve(plan=lambda index, body: Answer(drop=True))
    llm_settings.LLM_BASE_URL = server.base_url
    # when a call is made (no client retries), then it fails at once, sent once
    with pytest.raises(LLMUnavailable, match="APIConnectionError") as failure:
        _chat(llm_client())
    assert isinstance(failure.value.__cause__, openai.APIConnectionError)
    assert len(server.requests) == 1


def test_an_answer_cut_after_its_first_bytes_is_not_sent_again(llm_settings, serve):
    # given a server that answers the second request of a connection with half a status line
    server = serve(plan=lambda index, body: Answer(content="first", partial=index == 1))
    llm_settings.LLM_BASE_URL = server.base_url
    client = llm_client()
    assert _chat(client) == "first"
    # when the next call is made on the kept connection, then it fails without a resend
    with pytest.raises(LLMUnavailable, match="APIConnectionError"):
        _chat(client)
    assert len(server.requests) == 2
    assert server.accepts == 1


def test_chunked_and_gzip_answers_are_read(llm_settings, serve):
    # given a server whose answers come in chunks (with an extension and a trailer), gzipped,
    # or both
    kinds = [
        Answer(content="chunked " * 40, chunked=True),
        Answer(content="gzip " * 40, gzip=True),
        Answer(content="both " * 40, chunked=True, gzip=True),
        Answer(content="plain"),
    ]
    server = serve(plan=lambda index, body: kinds[index])
    llm_settings.LLM_BASE_URL = server.base_url
    client = llm_client()
    # when they are asked for, then each is read whole and the connection carries them all
    assert [_chat(client) for _ in kinds] == [kind.content for kind in kinds]
    assert server.accepts == 1


def test_connection_close_and_a_body_that_ends_with_the_connection(llm_settings, serve):
    # given a server that says `Connection: close`, then sends a body without a length
    kinds = [
        Answer(content="closing", connection_close=True),
        Answer(content="unsized " * 50, unsized=True),
        Answer(content="kept"),
        Answer(content="kept too"),
    ]
    server = serve(plan=lambda index, body: kinds[index])
    llm_settings.LLM_BASE_URL = server.base_url
    client = llm_client()
    # when they are asked for, then each is read whole, each of the first two on its own
    # connection, and the last two share one
    assert [_chat(client) for _ in kinds] == [kind.content for kind in kinds]
    assert server.accepts == 3
    assert len(server.requests) == 4


def test_a_server_error_is_retried_by_the_client(llm_settings, serve):
    # given a server that fails once with 500, and a client allowed one retry
    llm_settings.LLM_MAX_RETRIES = 1
    server = serve(
        plan=lambda index, body: Answer(status=500) if index == 0 else Answer(content="second")
    )
    llm_settings.LLM_BASE_URL = server.base_url
    # when a call is made, then the client's retry gets the answer, on the same connection
    assert _chat(llm_client()) == "second"
    assert len(server.requests) == 2
    assert server.accepts == 1


def test_a_read_timeout_is_the_clients_timeout_and_is_retried_by_it(llm_settings, serve):
    # given a server slower than the timeout, and a client allowed one retry
    llm_settings.LLM_MAX_RETRIES = 1
    llm_settings.LLM_TIMEOUT_SECONDS = 0.3
    server = serve(plan=lambda index, body: Answer(hold=30))
    llm_settings.LLM_BASE_URL = server.base_url
    # when a call is made, then it ends as the client's timeout after its retry: the
    # transport itself never sends a timed-out request again
    started = time.monotonic()
    with pytest.raises(LLMUnavailable, match="APITimeoutError") as failure:
        _chat(llm_client())
    assert isinstance(failure.value.__cause__, openai.APITimeoutError)
    assert len(server.requests) == 2
    assert time.monotonic() - started < 10


def test_connection_errors_are_httpx2_connect_errors(llm_settings):
    # given a port nobody listens on
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = LeanTransport()
    request = httpx2.Request("POST", f"http://127.0.0.1:{port}/v1/chat/completions", content=b"{}")
    # when a request is sent there, then it is httpx2's ConnectError (the client's
    # APIConnectionError)
    with pytest.raises(httpx2.ConnectError):
        transport.handle_request(request)
    llm_settings.LLM_BASE_URL = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(LLMUnavailable, match="APIConnectionError"):
        _chat(llm_client())


def test_a_connect_timeout_is_the_clients_timeout(llm_settings):
    # given a listener whose backlog is full, so a new connection is never accepted
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = [socket.socket() for _ in range(3)]
    try:
        for filler in fillers:
            filler.setblocking(False)
            try:
                filler.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
        time.sleep(0.2)
        transport = LeanTransport()
        request = httpx2.Request(
            "POST",
            f"http://127.0.0.1:{port}/v1/chat/completions",
            content=b"{}",
            extensions={"timeout": {"connect": 0.3, "read": 5, "write": 5, "pool": 5}},
        )
        # when a request is sent there, then it is httpx2's ConnectTimeout after the connect
        # timeout, and the client's APITimeoutError
        started = time.monotonic()
        with pytest.raises(httpx2.ConnectTimeout):
            transport.handle_request(request)
        assert 0.25 < time.monotonic() - started < 3
        llm_settings.LLM_TIMEOUT_SECONDS = 0.3
        llm_settings.LLM_BASE_URL = f"http://127.0.0.1:{port}/v1"
        with pytest.raises(LLMUnavailable, match="APITimeoutError"):
            _chat(llm_client())
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_an_idle_connection_is_replaced_after_the_keepalive_expiry(serve):
    # given a transport whose connections expire after 0.2 s idle
    server = serve(plan=lambda index, body: Answer(content=f"answer {index}"))
    transport = LeanTransport(keepalive_expiry=0.2)
    client = openai.OpenAI(
        base_url=server.base_url,
        api_key="k",
        max_retries=0,
        http_client=openai.DefaultHttpxClient(transport=transport),
    )
    # when two calls follow at once and a third after 0.4 s, then the third has a new connection
    assert [_chat(client), _chat(client)] == ["answer 0", "answer 1"]
    assert server.accepts == 1
    time.sleep(0.4)
    assert _chat(client) == "answer 2"
    assert server.accepts == 2
    # and closing the transport closes its connections (a next call connects again)
    transport.close()
    assert _chat(client) == "answer 3"
    assert server.accepts == 3


def test_many_threads_share_the_client_each_with_its_own_answers(llm_settings, serve):
    # given a server echoing what each request asked, and one client shared by 50 threads
    server = serve(plan=lambda index, body: Answer(content="re: " + body["messages"][0]["content"]))
    llm_settings.LLM_BASE_URL = server.base_url
    client = llm_client()
    wrong: list[tuple[str, str]] = []
    failed: list[BaseException] = []
    start = threading.Barrier(50)

    def work(thread: int) -> None:
        start.wait()
        try:
            for call in range(20):
                asked = f"thread {thread} call {call}"
                answered = _chat(client, asked)
                if answered != f"re: {asked}":
                    wrong.append((asked, answered))
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    # when each makes 20 calls at once, then every answer is its own request's, one connection
    # per thread
    assert failed == [] and wrong == []
    assert len(server.requests) == 1000
    assert server.accepts == 50


def test_tls_with_a_certificate_trusted_through_verify(llm_settings, serve, tls_files):
    # given a TLS server with a self-signed certificate
    cert_path, server_context = tls_files
    server = serve(plan=lambda index, body: Answer(content=f"secure {index}"), tls=server_context)
    trusted = ssl.create_default_context(cafile=str(cert_path))
    client = openai.OpenAI(
        base_url=server.base_url,
        api_key="k",
        max_retries=0,
        http_client=report_sent(openai.DefaultHttpxClient(transport=LeanTransport(verify=trusted))),
    )
    # when calls are made through a transport that trusts it, then they succeed on one
    # connection
    assert [_chat(client) for _ in range(5)] == [f"secure {i}" for i in range(5)]
    assert server.accepts == 1


def test_tls_trust_follows_ssl_cert_file_and_refuses_an_unknown_certificate(
    llm_settings, serve, tls_files, monkeypatch
):
    # given a TLS server with a self-signed certificate
    cert_path, server_context = tls_files
    server = serve(plan=lambda index, body: Answer(content="secure"), tls=server_context)
    llm_settings.LLM_BASE_URL = server.base_url
    # when the settings' client does not trust it, then the call fails as a connection error
    with pytest.raises(LLMUnavailable, match="APIConnectionError") as failure:
        _chat(llm_client())
    assert "CERTIFICATE_VERIFY_FAILED" in str(failure.value.__cause__.__cause__)
    # and when SSL_CERT_FILE names its certificate (as for the default client), it succeeds
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_path))
    assert _chat(llm_client()) == "secure"


def test_a_proxy_from_the_environment_is_used_and_no_proxy_is_honoured(
    llm_settings, serve, monkeypatch
):
    # given a forwarding proxy (the server answers the requests sent to it) set in HTTP_PROXY
    proxy = serve(plan=lambda index, body: Answer(content="via proxy"))
    direct = serve(plan=lambda index, body: Answer(content="direct"))
    port = direct.base_url.rsplit(":", 1)[1].split("/")[0]
    monkeypatch.setenv("HTTP_PROXY", proxy.base_url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    llm_settings.LLM_BASE_URL = f"http://llm.example:{port}/v1"
    # when a call is made, then it goes to the proxy, asking for the LLM's URL
    assert _chat(llm_client()) == "via proxy"
    assert proxy.targets == [f"http://llm.example:{port}/v1/chat/completions"]
    # and with the host in NO_PROXY, the call goes directly
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    llm_settings.LLM_BASE_URL = direct.base_url
    assert _chat(llm_client()) == "direct"
    assert direct.targets == ["/v1/chat/completions"]
