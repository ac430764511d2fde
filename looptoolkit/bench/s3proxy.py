"""The fault-injecting HTTP proxy between S3 clients and the local S3 server.

:class:`~looptoolkit.bench.s3local.LocalS3` puts this proxy in front of its server:
clients connect to the proxy as if it were the S3 endpoint, and the proxy forwards
each request byte for byte (the Host header and the SigV4 signature untouched) and
streams the response back. On the way it adds the latency of a distant bucket
(before each response's first byte, each request its own delay, requests in
parallel never queued behind one another), injects the scripted :class:`Faults`
and counts what it sees in :class:`ProxyStats`.

It speaks HTTP/1.1 with keep-alive, one upstream connection per client connection,
on an asyncio loop in a daemon thread, so pools of clients (obstore, s3fs on
aiohttp, boto3) can keep many requests in flight at once.

Examples:
    >>> faults = Faults()
    >>> faults.add("503", times=2, match="data/")
    >>> faults.add("truncate", after_bytes=100)
    >>> faults.pending()
    3
    >>> faults.take("GET", "/bucket/data/0.0").kind
    '503'
    >>> faults.take("HEAD", "/bucket/data/0.0") is None  # rules match GET by default
    True
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import urllib.parse
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

FAULT_KINDS = ("503", "429", "500", "reset", "truncate", "stall", "corrupt")
# kind -> (status, reason, S3 error code, message), as S3 words them.
_ERRORS = {
    "503": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "429": (429, "Too Many Requests", "TooManyRequests", "Please reduce your request rate."),
    "500": (500, "Internal Server Error", "InternalError", "We encountered an internal error."),
}
_CHUNK = 1 << 18  # bytes read from the server at a time
_HOP_BY_HOP = (b"connection", b"keep-alive")


@dataclass
class Rule:
    """One scripted fault: see :meth:`Faults.add`."""

    kind: str
    times: int
    method: str
    match: str
    after_bytes: int
    delay_s: float


class Faults:
    """Scripted faults, applied by the proxy in the order they were added.

    Each rule applies to the next ``times`` requests whose method is ``method``
    (``"*"``: any) and whose URL path, decoded, contains ``match`` (the bucket and
    the key: ``"/bucket/key"``). A request takes the first rule it matches. Safe to
    change from any thread while requests are in flight.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []

    def add(
        self,
        kind: str,
        *,
        times: int = 1,
        method: str = "GET",
        match: str = "",
        after_bytes: int = 0,
        delay_s: float = 0.0,
    ) -> None:
        """Script a fault for the next ``times`` matching requests.

        Args:
            kind: ``"503"`` (an S3 ``SlowDown`` error), ``"429"`` (``TooManyRequests``),
                ``"500"`` (``InternalError``): the proxy answers with that error and
                the server never sees the request. ``"reset"``: the connection is
                reset (RST) before any response, or, with ``after_bytes``, after the
                headers and that many bytes of the body. ``"truncate"``: the headers
                (with the full Content-Length) and ``after_bytes`` bytes of the body,
                then the connection is closed. ``"stall"``: ``delay_s`` more before
                the response (for timeouts). ``"corrupt"``: the byte at offset
                ``after_bytes`` of the body is flipped, the length kept.
            times: how many requests the rule applies to.
            method: the HTTP method the rule applies to, or ``"*"`` for any.
            match: a substring of the decoded URL path (``""``: every path).
            after_bytes: where ``reset``, ``truncate`` and ``corrupt`` act in the body.
            delay_s: the extra wait of ``stall``.

        Raises:
            ValueError: an unknown ``kind``, ``times < 1``, a negative ``after_bytes``
                or ``delay_s``, or a ``stall`` without ``delay_s``.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"`kind` must be one of {', '.join(FAULT_KINDS)}, got {kind!r}.")
        if times < 1:
            raise ValueError(f"`times` must be >= 1, got {times}.")
        if after_bytes < 0:
            raise ValueError(f"`after_bytes` must be >= 0, got {after_bytes}.")
        if delay_s < 0 or (kind == "stall" and delay_s == 0):
            raise ValueError(
                f"`delay_s` must be > 0 for a stall and >= 0 otherwise, got {delay_s}."
            )
        rule = Rule(kind, times, method.upper(), match, after_bytes, delay_s)
        with self._lock:
            self._rules.append(rule)

    def clear(self) -> None:
        """Drop every rule."""
        with self._lock:
            self._rules.clear()

    def pending(self) -> int:
        """How many more requests the rules will fault (their remaining counts summed)."""
        with self._lock:
            return sum(rule.times for rule in self._rules)

    def take(self, method: str, path: str) -> Rule | None:
        """The rule for a request (one use of it spent), or ``None``; called by the proxy."""
        with self._lock:
            for i, rule in enumerate(self._rules):
                if rule.method in ("*", method) and rule.match in path:
                    rule.times -= 1
                    if rule.times == 0:
                        del self._rules[i]
                    return rule
        return None


class ProxyStats:
    """What the proxy has seen since it started or was last reset; thread-safe.

    Attributes:
        requests: requests received.
        by_method: requests per HTTP method.
        range_requests: requests with a Range header.
        body_bytes: response body bytes passed on from the server (not those of injected
            errors).
        max_in_flight: the most requests open at once (received, response not done).
        connections: client connections accepted.
        faults: requests a fault rule applied to.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.in_flight = 0
        self.reset()

    def reset(self) -> None:
        """Zero the counters (requests open now still count as in flight)."""
        with self._lock:
            self.requests = 0
            self.by_method: dict[str, int] = {}
            self.range_requests = 0
            self.body_bytes = 0
            self.max_in_flight = self.in_flight
            self.connections = 0
            self.faults = 0

    def snapshot(self) -> dict[str, Any]:
        """The counters as a plain dict (``by_method`` copied)."""
        with self._lock:
            return {
                "requests": self.requests,
                "by_method": dict(self.by_method),
                "range_requests": self.range_requests,
                "body_bytes": self.body_bytes,
                "max_in_flight": self.max_in_flight,
                "in_flight": self.in_flight,
                "connections": self.connections,
                "faults": self.faults,
            }

    def _opened(self, method: str, ranged: bool, faulted: bool) -> None:
        with self._lock:
            self.requests += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1
            self.range_requests += ranged
            self.faults += faulted
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _closed(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _sent(self, n: int) -> None:
        with self._lock:
            self.body_bytes += n

    def _connected(self) -> None:
        with self._lock:
            self.connections += 1


class _Message:
    """The head of an HTTP request or response: first line and headers (names lower-cased)."""

    def __init__(self, raw: bytes) -> None:
        lines = raw.decode("latin-1").split("\r\n")
        self.raw = raw
        self.first = lines[0].split(" ", 2)
        self.headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()

    def keep_alive(self) -> bool:
        """Whether the sender keeps the connection open after this message."""
        # A request line ends with the version, a status line starts with it.
        version = self.first[0] if self.first[0].startswith("HTTP/") else self.first[-1]
        connection = self.headers.get("connection", "").lower()
        return connection != "close" and (version != "HTTP/1.0" or connection == "keep-alive")

    def chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()


async def _read_chunked(reader: asyncio.StreamReader) -> AsyncGenerator[tuple[bytes, bool], None]:
    """A chunked body as it came (sizes, data and trailers), chunk by chunk, the last flagged."""
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            trailer = line
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                trailer += line
            yield trailer + line, True
            return
        yield line + await reader.readexactly(size + 2), False


def _without_connection(head: bytes) -> bytes:
    """A response head without its hop-by-hop Connection and Keep-Alive headers."""
    lines = head.split(b"\r\n")
    return b"\r\n".join(
        line for line in lines if line.split(b":")[0].strip().lower() not in _HOP_BY_HOP
    )


def _body_kind(method: str, response: _Message) -> str:
    """How the response body is delimited: "empty", "framed" or "until-close"."""
    length = response.headers.get("content-length")
    if method == "HEAD" or response.first[1] in ("204", "304") or length == "0":
        return "empty"
    return "framed" if response.chunked() or length is not None else "until-close"


class _InFlight:
    """A request counted in flight until just before its response's last byte goes out.

    So a client that has its whole response never finds the request still counted,
    and the stats of requests done one after another on a pool of connections never
    show two at once.
    """

    def __init__(self, stats: ProxyStats, writer: asyncio.StreamWriter) -> None:
        self._stats = stats
        self.writer = writer
        self._open = True

    def send(self, data: bytes, *, body: int = 0, last: bool = False) -> None:
        """Write ``data``, of which the final ``body`` bytes are response body."""
        self._stats._sent(body)
        if last:
            self.close()
        self.writer.write(data)

    def close(self) -> None:
        if self._open:
            self._open = False
            self._stats._closed()


class _Upstream:
    """The connection to the server that serves one client connection, opened when needed."""

    def __init__(self, address: tuple[str, int]) -> None:
        self._address = address
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def exchange(self, request: bytes) -> _Message:
        """Send a request, return the response's head (interim 1xx responses skipped)."""
        reused = self._writer is not None
        try:
            return await self._exchange(request)
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.close()
            # A kept-alive connection the server has closed fails before any byte of
            # the response: send the request again, once, on a new connection.
            partial = getattr(exc, "partial", b"")
            if not reused or partial:
                raise
            return await self._exchange(request)

    async def _exchange(self, request: bytes) -> _Message:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(*self._address)
        assert self._reader is not None
        self._writer.write(request)
        await self._writer.drain()
        while True:
            head = _Message(await self._reader.readuntil(b"\r\n\r\n"))
            if not head.first[1].startswith("1"):
                return head

    async def body(self, response: _Message) -> AsyncGenerator[tuple[bytes, bool], None]:
        """The response body as it comes, framing included, piece by piece, the last flagged.

        Where the server ends the body by closing the connection, no piece is flagged.
        """
        assert self._reader is not None
        if response.chunked():
            async for chunk in _read_chunked(self._reader):
                yield chunk
        elif "content-length" in response.headers:
            left = int(response.headers["content-length"])
            while left:
                piece = await self._reader.read(min(left, _CHUNK))
                if not piece:
                    raise asyncio.IncompleteReadError(b"", left)
                left -= len(piece)
                yield piece, left == 0
        else:
            while piece := await self._reader.read(_CHUNK):
                yield piece, False
            self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close the connection with a TCP reset, as a crashed server or a middlebox does."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _error_response(kind: str, method: str, path: str) -> tuple[bytes, bytes]:
    status, reason, code, message = _ERRORS[kind]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        f"<Resource>{escape(path)}</Resource><RequestId>looptoolkit-fault</RequestId></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\nx-amz-request-id: looptoolkit-fault\r\n\r\n"
    ).encode()
    return head, b"" if method == "HEAD" else body


class Proxy:
    """The proxy on 127.0.0.1 at a free port, forwarding to ``upstream``.

    Args:
        upstream: the server's ``(host, port)``.
        latency: returns the delay to add before each response, read per request.
        faults: the fault script.
        stats: the counters to update.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        latency: Callable[[], float],
        faults: Faults,
        stats: ProxyStats,
    ) -> None:
        self._upstream = upstream
        self._latency = latency
        self._faults = faults
        self._stats = stats
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> int:
        """Listen and serve in a daemon thread; returns the port."""
        self._thread = threading.Thread(target=self._run, name="looptoolkit-s3-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            raise RuntimeError("the S3 proxy did not start") from self._failure
        return self.port

    def stop(self) -> None:
        """Close every connection, stop listening and end the thread."""
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        if self._thread is not None:
            self._thread.join()
        self._thread = None

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to the thread that called start()
            self._failure = exc
        finally:
            self._ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._client, "127.0.0.1", 0, backlog=1024)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stopping.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._stats._connected()
        upstream = _Upstream(self._upstream)
        try:
            while await self._request(reader, writer, upstream):
                pass
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a client or server that went away mid-message, or a malformed one
        except asyncio.CancelledError:
            pass  # stop(): the task ends here (asyncio's streams log a task left cancelled)
        finally:
            upstream.close()
            writer.close()
            self._tasks.discard(task)

    async def _request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: _Upstream
    ) -> bool:
        """Serve one request; returns whether the client connection stays open."""
        try:
            head = _Message(await reader.readuntil(b"\r\n\r\n"))
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise
            return False  # the client closed its idle connection
        method, target, _ = head.first
        if head.headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = b""
        if head.chunked():
            body = b"".join([piece async for piece, _ in _read_chunked(reader)])
        elif "content-length" in head.headers:
            body = await reader.readexactly(int(head.headers["content-length"]))
        path = urllib.parse.unquote(urllib.parse.urlsplit(target).path)
        rule = self._faults.take(method, path)
        self._stats._opened(method, "range" in head.headers, rule is not None)
        request = _InFlight(self._stats, writer)
        try:
            delay = self._latency() + (rule.delay_s if rule and rule.kind == "stall" else 0.0)
            if delay > 0:
                await asyncio.sleep(delay)
            if rule is not None and rule.kind in _ERRORS:
                error_head, error_body = _error_response(rule.kind, method, path)
                request.send(error_head + error_body, last=True)
                await writer.drain()
                return head.keep_alive()
            if rule is not None and rule.kind == "reset" and rule.after_bytes == 0:
                request.close()
                _reset(writer)
                return False
            return await self._forward(head, body, request, upstream, rule)
        finally:
            request.close()

    async def _forward(
        self,
        head: _Message,
        body: bytes,
        request: _InFlight,
        upstream: _Upstream,
        rule: Rule | None,
    ) -> bool:
        response = await upstream.exchange(head.raw + body)
        kind = _body_kind(head.first[0], response)
        close_upstream = not response.keep_alive() or kind == "until-close"
        # Connection is hop-by-hop: the server closes every connection after one response
        # (werkzeug does), but the client's connection stays open, as S3's do.
        request.send(
            response.raw if kind == "until-close" else _without_connection(response.raw),
            last=kind == "empty",
        )
        cut = rule.after_bytes if rule and rule.kind in ("reset", "truncate") else None
        flip = rule.after_bytes if rule and rule.kind == "corrupt" else None
        writer = request.writer
        sent = 0
        if kind != "empty":
            pieces = upstream.body(response)
            try:
                async for chunk, last in pieces:
                    piece = chunk
                    if flip is not None and sent <= flip < sent + len(piece):
                        i = flip - sent
                        piece = piece[:i] + bytes([piece[i] ^ 0xFF]) + piece[i + 1 :]
                    if cut is not None and sent + len(piece) >= cut:
                        piece, last = piece[: cut - sent], True
                    request.send(piece, body=len(piece), last=last)
                    sent += len(piece)
                    await writer.drain()
                    if last:
                        break
            finally:
                await pieces.aclose()
        if cut is not None:
            assert rule is not None
            request.close()
            upstream.close()  # the rest of the body, if any, is never read
            writer.transport.set_write_buffer_limits(0)
            await writer.drain()  # what was sent reaches the client before the end
            if rule.kind == "reset":
                _reset(writer)
            return False
        if close_upstream:
            upstream.close()
        return kind != "until-close" and head.keep_alive()
