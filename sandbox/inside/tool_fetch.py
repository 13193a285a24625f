"""The fetch tool of tools.py: HTTP(S) through the sandbox's egress proxy."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    import http.client
    from typing import Any

if TYPE_CHECKING or __package__:
    from .tool_paths import (
        ToolError,
        _int_arg,
        _result,
        _str_arg,
    )
else:  # inside the sandbox, where this directory is first on sys.path (see tools.py)
    from tool_paths import (
        ToolError,
        _int_arg,
        _result,
        _str_arg,
    )


FETCH_BODY_BYTES = 64 * 1024
FETCH_MAX_REDIRECTS = 5
FETCH_HOP_TIMEOUT_S = 20.0


class _Response:
    def __init__(
        self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes, cut: bool
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.truncated = cut

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


def _proxy_for(scheme: str) -> tuple[str, int] | None:
    import urllib.parse

    for key in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY"):
        value = os.environ.get(key)
        if value:
            parsed = urllib.parse.urlsplit(value if "://" in value else "http://" + value)
            if parsed.hostname:
                return parsed.hostname, parsed.port or 3128
    return None


def _read_body(resp: http.client.HTTPResponse, method: str, max_bytes: int) -> tuple[bytes, bool]:
    if method == "HEAD":
        return b"", False
    body = resp.read(max_bytes + 1)
    return body[:max_bytes], len(body) > max_bytes


def _one_request(
    method: str, url: str, headers: dict[str, str], body: bytes | None, max_bytes: int
) -> _Response:
    import http.client
    import socket
    import ssl
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    try:
        host = host if host.isascii() else host.encode("idna").decode("ascii")
    except UnicodeError:
        raise ToolError("invalid_args", f"{url}: invalid host name") from None
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise ToolError("invalid_args", f"{url}: invalid port") from None
    proxy = _proxy_for(scheme)
    if proxy is None:
        raise ToolError(
            "network_blocked",
            "this run has no network access; use ask_user to request a domain",
        )
    authority = host if ":" not in host else f"[{host}]"
    if port != (443 if scheme == "https" else 80):
        authority += f":{port}"
    conn: http.client.HTTPConnection
    if scheme == "http":
        conn = http.client.HTTPConnection(proxy[0], proxy[1], timeout=FETCH_HOP_TIMEOUT_S)
        target = urllib.parse.urlunsplit((scheme, authority, parts.path or "/", parts.query, ""))
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
    else:
        sock = socket.create_connection(proxy, timeout=FETCH_HOP_TIMEOUT_S)
        connect_to = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        sock.sendall(f"CONNECT {connect_to} HTTP/1.1\r\nHost: {connect_to}\r\n\r\n".encode())
        answer = http.client.HTTPResponse(sock, method="CONNECT")
        answer.begin()
        if answer.status != 200:
            data, cut = _read_body(answer, "GET", 4096)
            sock.close()
            return _Response(answer.status, answer.reason, answer.getheaders(), data, cut)
        context = ssl.create_default_context()
        wrapped = context.wrap_socket(sock, server_hostname=host)
        conn = http.client.HTTPSConnection(host, port, timeout=FETCH_HOP_TIMEOUT_S)
        conn.sock = wrapped
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", authority)
    conn.putheader("Accept-Encoding", "identity")
    conn.putheader("Connection", "close")
    for key, value in headers.items():
        if key.lower() not in ("host", "accept-encoding", "connection", "content-length"):
            conn.putheader(key, value)
    if body is not None:
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body)
    resp = conn.getresponse()
    data, cut = _read_body(resp, method, max_bytes)
    conn.close()
    return _Response(resp.status, resp.reason, resp.getheaders(), data, cut)


_SHOWN_HEADERS = ("content-type", "content-length", "location", "retry-after", "www-authenticate")
_CREDENTIAL_HEADERS = ("authorization", "cookie", "proxy-authorization")


def _origin(url: str) -> tuple[str, str, int | None]:
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def op_fetch(request: dict[str, Any]) -> dict[str, Any]:
    import http.client
    import ssl
    import urllib.parse

    url = _str_arg(request, "url")
    method = (_str_arg(request, "method", required=False) or "GET").upper()
    if method not in ("GET", "POST", "HEAD"):
        raise ToolError("invalid_args", f"method {method!r}: only GET, POST and HEAD are supported")
    headers_raw = request.get("headers") or {}
    if not isinstance(headers_raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers_raw.items()
    ):
        raise ToolError("invalid_args", "headers must be an object of strings")
    headers: dict[str, str] = dict(headers_raw)
    for key, value in headers.items():
        if any(c in key + value for c in "\r\n\x00"):
            raise ToolError("invalid_args", f"header {key!r} contains CR, LF or NUL")
    body_text = request.get("body")
    body = body_text.encode("utf-8") if isinstance(body_text, str) else None
    max_bytes = _int_arg(request, "max_bytes", FETCH_BODY_BYTES) or FETCH_BODY_BYTES
    hops: list[str] = []
    for _hop in range(FETCH_MAX_REDIRECTS + 1):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme.lower() not in ("http", "https") or not parsed.hostname:
            raise ToolError("invalid_args", f"{url}: only absolute http:// and https:// URLs")
        if any(c in url for c in " \r\n\x00"):
            raise ToolError("invalid_args", f"{url!r}: URL contains whitespace or control bytes")
        try:
            resp = _one_request(method, url, headers, body if method == "POST" else None, max_bytes)
        except ToolError:
            raise
        except ssl.SSLError as exc:
            raise ToolError("http_error", f"{url}: TLS failure: {exc.reason or exc}") from None
        except TimeoutError:
            raise ToolError(
                "timeout", f"{url}: no answer within {FETCH_HOP_TIMEOUT_S:.0f} s", retryable=True
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise ToolError("http_error", f"{url}: {exc}", retryable=True) from None
        verdict = resp.header("X-Motor-Egress")
        if verdict is not None:
            message = resp.body.decode("utf-8", errors="replace").strip()
            if verdict.startswith("denied"):
                prefix = f"redirect {len(hops)} refused: " if hops else ""
                return _result(
                    prefix + (message or f"{parsed.hostname} is not allowed ({verdict})"),
                    ok=False,
                    error_code="network_blocked",
                    retryable="tunnel_limit" in verdict,
                    status=resp.status,
                )
            return _result(
                f"{url}: the egress proxy could not reach the destination ({verdict}): {message}",
                ok=False,
                error_code="http_error",
                retryable=True,
                status=resp.status,
            )
        location = resp.header("Location")
        if resp.status in (301, 302, 303, 307, 308) and location:
            hops.append(f"{resp.status} -> {location}")
            if len(hops) > FETCH_MAX_REDIRECTS:
                break
            new_url = urllib.parse.urljoin(url, location)
            if _origin(new_url) != _origin(url):
                # never carry credentials to another origin
                headers = {k: v for k, v in headers.items() if k.lower() not in _CREDENTIAL_HEADERS}
            if resp.status == 303 or (resp.status in (301, 302) and method == "POST"):
                method = "GET"
                body = None
            url = new_url
            continue
        return _format_response(url, resp, hops)
    raise ToolError("http_error", f"more than {FETCH_MAX_REDIRECTS} redirects: " + "; ".join(hops))


def _format_response(url: str, resp: _Response, hops: list[str]) -> dict[str, Any]:
    import re

    lines = [f"HTTP {resp.status} {resp.reason}", f"url: {url}"]
    if hops:
        lines.append("redirects: " + "; ".join(hops))
    for key, value in resp.headers:
        if key.lower() in _SHOWN_HEADERS:
            lines.append(f"{key.lower()}: {value}")
    content_type = (resp.header("Content-Type") or "").lower()
    match = re.search(r"charset=([\w.-]+)", content_type)
    try:
        text = resp.body.decode(match.group(1) if match else "utf-8", errors="replace")
    except LookupError:
        text = resp.body.decode("utf-8", errors="replace")
    lines.append("")
    lines.append(text)
    if resp.truncated:
        lines.append(f"\n[body truncated at {len(resp.body)} bytes]")
    output = "\n".join(lines)
    if resp.status >= 400:
        retryable = resp.status == 429 or resp.status >= 500
        return _result(
            output,
            ok=False,
            error_code="http_error",
            retryable=retryable,
            truncated=resp.truncated,
            status=resp.status,
        )
    return _result(output, truncated=resp.truncated, status=resp.status)
