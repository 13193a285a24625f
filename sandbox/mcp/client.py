"""The host side of a sandboxed MCP server: the ``mcp`` SDK's ClientSession over the FIFOs of a
`SandboxedProcess`, behind a synchronous, thread-safe facade.

Each client runs its own event loop in a daemon thread (the callers are synchronous Celery and
Django code). Messages are newline-delimited JSON-RPC, as over any stdio transport. Unlike the
SDK's stdio client, a line on the server's stdout that is not a JSON-RPC message is not skipped:
the server broke the protocol (a ``print`` in a tool, a library writing to stdout), so the
connection fails with that line quoted (`McpProtocolError`), every waiting call with it, and the
owner of the client decides what follows (a restart). When the process ends, the connection
ends with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import threading
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage

from sandbox.mcp.process import SandboxedProcess

T = TypeVar("T")

#: the most bytes one message may take (a longer line fails the connection)
MAX_LINE_BYTES = 16 * 1024 * 1024
#: how much of an offending stdout line an error quotes (characters)
QUOTE_CHARS = 200


class McpError(Exception):
    """A call to the server failed: the server is gone, timed out, or answered an error."""


class McpProtocolError(McpError):
    """The server wrote something that is not a JSON-RPC message to its stdout."""


class McpTimeout(McpError):
    """The server did not answer within the limit."""


@dataclass(frozen=True)
class ToolInfo:
    """One tool from ``tools/list``: its name, description and input JSON Schema."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class CallOutcome:
    """A ``tools/call`` answer: the text of its content blocks joined, whether the tool said
    it failed (``isError``), and its structured content when it sent one."""

    text: str
    is_error: bool
    structured: dict[str, Any] | None = None


class McpClient:
    """Talks MCP to one `SandboxedProcess`. `connect` does ``initialize``; `list_tools` and
    `call_tool` block the calling thread up to their timeout. `close` ends the connection (not
    the process).

    The event loop has no thread of its own: each call runs it in the calling thread until its
    answer is in (calls are serialised). Between calls nothing runs on the host, whatever the
    server writes waits in its FIFO, and a warm call costs no hand-over between threads."""

    def __init__(self, process: SandboxedProcess) -> None:
        self.process = process
        self.protocol_error: str | None = None
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._session: ClientSession | None = None
        self._stop: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ sync facade

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float, what: str) -> T:
        with self._lock:
            if self._closed:
                coro.close()
                raise McpError("the connection to the server is closed")
            try:
                return self._loop.run_until_complete(asyncio.wait_for(coro, timeout_s))
            except TimeoutError:
                raise McpTimeout(
                    f"the server did not answer {what} within {timeout_s:g} s"
                ) from None
            except McpError:
                raise
            except Exception as exc:  # noqa: BLE001 - every failure of the exchange is an McpError
                raise McpError(self._explain(exc)) from exc

    def _explain(self, exc: BaseException) -> str:
        if self.protocol_error is not None:
            return self.protocol_error
        if self.process.exited.is_set():
            return f"the server ended ({self.process.exit_summary()})"
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def connect(self, timeout_s: float) -> types.InitializeResult:
        """Open the session and do the ``initialize`` handshake."""
        ready: asyncio.Future[types.InitializeResult] = self._loop.create_future()
        self._runner = self._loop.create_task(self._serve(ready))
        return self._run(_wait(ready), timeout_s, "initialize")

    def list_tools(self, timeout_s: float) -> list[ToolInfo]:
        """``tools/list``, following pagination."""
        return self._run(self._list_tools(), timeout_s, "tools/list")

    def call_tool(self, name: str, arguments: dict[str, Any], timeout_s: float) -> CallOutcome:
        """``tools/call``."""
        return self._run(self._call_tool(name, arguments), timeout_s, f"tools/call {name}")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._stop is not None:
                    self._stop.set()
                if self._runner is not None and not self._runner.done():
                    with contextlib.suppress(BaseException):
                        self._loop.run_until_complete(asyncio.wait_for(self._runner, 5))
            finally:
                with contextlib.suppress(Exception):
                    self._loop.close()

    # ------------------------------------------------------------------ async side

    async def _serve(self, ready: asyncio.Future[types.InitializeResult]) -> None:
        self._stop = asyncio.Event()
        try:
            async with self._transport() as (read_stream, write_stream):
                async with ClientSession(read_stream, write_stream) as session:
                    result = await session.initialize()
                    self._session = session
                    ready.set_result(result)
                    await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - handed to whoever waits
            if not ready.done():
                ready.set_exception(exc)
        finally:
            self._session = None
            if not ready.done():
                ready.set_exception(McpError(self._explain(RuntimeError("connection ended"))))

    def _require(self) -> ClientSession:
        if self._session is None:
            raise McpError(self._explain(RuntimeError("not connected")))
        return self._session

    async def _list_tools(self) -> list[ToolInfo]:
        session = self._require()
        tools: list[ToolInfo] = []
        cursor: str | None = None
        for _ in range(100):  # a server paginating forever is cut off
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            for tool in page.tools:
                schema = tool.input_schema
                tools.append(
                    ToolInfo(
                        name=tool.name,
                        description=tool.description or "",
                        input_schema=dict(schema) if isinstance(schema, dict) else schema,
                    )
                )
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        session = self._require()
        result = await session.call_tool(name, arguments)
        texts: list[str] = []
        for block in result.content:
            text = getattr(block, "text", None)
            if isinstance(text, str):
                texts.append(text)
            else:
                texts.append(json.dumps(block.model_dump(mode="json", exclude_none=True)))
        structured = result.structured_content
        return CallOutcome(
            text="\n".join(texts),
            is_error=bool(result.is_error),
            structured=dict(structured) if isinstance(structured, dict) else None,
        )

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        """Memory streams of SessionMessages bridged to the FIFOs."""
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](16)
        loop = asyncio.get_running_loop()
        out_fd, in_fd = self.process.out_fd, self.process.in_fd
        lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        buffer = bytearray()

        def readable() -> None:
            while True:
                try:
                    chunk = os.read(out_fd, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    lines.put_nowait(None)
                    return
                if not chunk:
                    return
                buffer.extend(chunk)
                while (end := buffer.find(b"\n")) >= 0:
                    lines.put_nowait(bytes(buffer[:end]))
                    del buffer[: end + 1]
                if len(buffer) > MAX_LINE_BYTES:
                    lines.put_nowait(bytes(buffer[:QUOTE_CHARS]))
                    buffer.clear()

        loop.add_reader(out_fd, readable)

        # the process's end closes the connection (the host's read-write FIFO ends never EOF)
        def ended() -> None:
            loop.call_soon_threadsafe(lines.put_nowait, None)

        self.process.on_exit(ended)

        async def pump_out() -> None:
            async with read_writer:
                while True:
                    line = await lines.get()
                    if line is None:
                        return
                    if not line.strip():
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError:
                        quoted = line[:QUOTE_CHARS].decode("utf-8", "replace")
                        self.protocol_error = (
                            "the server wrote a line to stdout that is not a JSON-RPC message "
                            f"(stdout is the protocol channel; log to stderr): {quoted!r}"
                        )
                        return
                    await read_writer.send(SessionMessage(message))

        async def pump_in() -> None:
            async with write_reader:
                async for session_message in write_reader:
                    data = (
                        session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        + "\n"
                    ).encode()
                    await _write_all(in_fd, data)

        async with anyio.create_task_group() as group:
            group.start_soon(pump_out)
            group.start_soon(pump_in)
            try:
                yield read_stream, write_stream
            finally:
                with contextlib.suppress(Exception):
                    loop.remove_reader(out_fd)
                group.cancel_scope.cancel()


async def _wait(future: asyncio.Future[T]) -> T:
    return await future


async def _write_all(fd: int, data: bytes) -> None:
    """Write `data` to the non-blocking `fd`, waiting while the pipe is full."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            await asyncio.sleep(0.005)
            continue
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise McpError("the server closed its stdin") from exc
            raise
        view = view[written:]


__all__ = [
    "CallOutcome",
    "McpClient",
    "McpError",
    "McpProtocolError",
    "McpTimeout",
    "ToolInfo",
]
