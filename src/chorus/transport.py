"""HTTP/1.1 transport limits: uvicorn's httptools protocol with a bounded request head and body.

uvicorn bounds neither the request head nor the wait for it: a 64 MiB header
or 20,000 headers are parsed and handed on, and a client that sends one
header line every few seconds (slowloris) holds its connection forever; so
does one that declares a body and sends a byte of it now and then. This
is a fast path in front of uvicorn, not a fork: :class:`BoundedHttpToolsProtocol`
subclasses uvicorn's :class:`~uvicorn.protocols.http.httptools_impl.HttpToolsProtocol`
and only watches the head go by:

* at most :attr:`HeadLimits.max_header_bytes` of request line and headers
  are fed to the parser; one more byte answers **431** (a head that began in
  the read that ended the request before it is sized from what the parser
  kept, once complete; the requests before it are answered first);
* more than :attr:`HeadLimits.max_headers` header fields answer **431**;
* the whole head must arrive within :attr:`HeadLimits.head_timeout_s` of
  connecting, or of its first bytes on a kept-alive connection; then **408**
  (or a plain close when not a byte came) — a timer armed only while a head
  is incomplete at the end of what arrived (an idle kept-alive connection is
  closed by uvicorn's keep-alive timeout);
* the whole body must arrive within :attr:`HeadLimits.body_timeout_s` of the
  head; then **408** while no response has begun (the app reads
  ``http.disconnect``; what it sends is dropped), else a plain close. Time
  the server itself stops reading (its flow control, a pipelined request
  waiting its turn) does not count; a long response is not cut;
* a client that reads nothing for :attr:`HeadLimits.send_timeout_s` while
  an answer waits to be sent (what this side holds, and on Linux the
  socket's send queue, did not shrink) is dropped: one that sent requests
  and never read the answers held its connection, and with enough of them
  every slot, for good; a slow reader that reads is timed afresh;
* a client that half-closes (``shutdown(SHUT_WR)``) still gets the answers
  to the whole requests it sent, then the connection closes;
* a WebSocket upgrade pipelined behind a request not yet answered answers
  **400** in turn (its answer went out after the 101, inside the socket);
* an ``Upgrade`` other than a WebSocket's (``h2c``, …) is ignored, as
  RFC 9110 §7.8 allows: llhttp ends such a request at its head and takes
  what follows for the other protocol, so its ``Content-Length`` body is
  framed here and the connection goes on in HTTP/1.1 (a chunked body
  answers **400**). Before, the body went unread and was parsed as the
  next request: one request a proxy passed on was answered as two;
* a request on a connection beyond :attr:`HeadLimits.max_connections` open
  ones (HTTP and WebSocket) answers **503** — except ``GET /healthz``: the
  process is alive however many sockets an attacker holds open, and a
  liveness probe that failed then would have it restarted for nothing
  (``/readyz`` does answer 503, so a load balancer sends new clients elsewhere);
* more than :data:`MAX_PIPELINED` requests waiting behind the one being
  answered on a connection (HTTP/1.1 pipelining, which no browser does)
  close it: a client that sends requests and never reads the answers made
  the server queue every one of them (~2 KB each, 200 MiB per 4 MB sent);
* a request the parser refuses (a garbage request line, a control character
  in a header, ``Content-Length`` beside ``Transfer-Encoding``, negative or
  of 20 digits) answers **400** ``BAD_REQUEST`` (uvicorn's is plain text).

Refusals are GraphQL-shaped JSON (``extensions.code``; no body for ``HEAD``), carry a fresh
``X-Request-Id``, log one warning line and close the connection (after
:data:`LINGER_S` of draining at most). Idle keep-alive connections are
closed by uvicorn itself (``timeout_keep_alive``); WebSocket handshakes go
through the same head limits before uvicorn upgrades them.

These bound each connection, not each client: many slow clients together
hold at most :attr:`HeadLimits.max_connections` connections, each for at
most the head and body bounds; a cap per client address belongs to the
load balancer in front (docs/limits.md, Transport limits).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from chorus.logs import REQUEST_ID_HEADER, new_request_id
from chorus.metrics import count_error

log = logging.getLogger("chorus.transport")

try:  # Linux: the bytes in a socket's send queue (SIOCOUTQ)
    import fcntl
    import termios

    _OUTQ: int | None = termios.TIOCOUTQ
except (ImportError, AttributeError):  # pragma: no cover - not Linux
    _OUTQ = None

LINGER_S = 2.0
"""Seconds a refused connection still reads (and drops) what the client sends.

Closing a socket with unread bytes makes the kernel send a reset, which can
destroy the refusal before the client reads it (a client still sending a
huge header); so the server stops writing, drains, then closes, as nginx's
``lingering_close`` does."""


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """The bounds of one server (``CHORUS_MAX_HEADER_BYTES`` and friends; seconds)."""

    max_header_bytes: int
    max_headers: int
    head_timeout_s: float
    max_connections: int
    body_timeout_s: float = 30.0
    send_timeout_s: float = 30.0


MAX_PIPELINED = 16
"""Requests a connection may have waiting behind the one being answered (pipelined)."""

LIVENESS_PATH = b"/healthz"
"""The path answered on a connection beyond the connection limit (the liveness probe)."""


class _Refused(Exception):
    """Raised inside a parser callback to stop the parser; the refusal is already set."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with :class:`HeadLimits`; see the module docstring.

    Use :func:`protocol_class` to get one bound to a server's limits (uvicorn
    builds its protocols from a class).
    """

    limits: ClassVar[HeadLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._reading_head = True
        self._body_due = False
        """A request's head is complete and its body is not (yet): it is timed."""
        self._head_bytes = 0
        self._header_count = 0
        self._refusal: tuple[HTTPStatus, str, str] | None = None
        self._refused = False
        self._running: RequestResponseCycle | None = None
        self._deferred: tuple[HTTPStatus, str, str] | None = None
        self._fresh_piece = True
        """What is being parsed starts where a head starts (its bytes are all counted)."""
        self._head_counted = True
        """Every byte of the head being read went through the count (not so for a head
        that began in the same read as the end of the request before it)."""
        self._upgrade_body = 0
        """The declared body of a request whose ``Upgrade`` is ignored (framed here)."""
        self._body_left = 0
        """Bytes of that body still to come."""
        self._send_timer: asyncio.TimerHandle | None = None
        self._sent_backlog = 0
        """Bytes waiting to be sent when the send timer was armed."""
        self._eof = False
        """The client half-closed: it sends nothing more but still reads."""
        self._head_seen = 0
        """The current head's request target and header bytes as the parser gave them."""
        """The refusal of bytes after whole pipelined requests: sent once they are answered."""

    # The head: its bytes, its header count, its deadline.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering: drop it
        self._unset_keepalive_if_required()
        while data:
            if self._body_left:  # the body of a request whose Upgrade was ignored
                data = self._take_body(data)
                continue
            if self._reading_head:
                self._fresh_piece = not self._head_bytes  # a message begun here is counted whole
                room = self.limits.max_header_bytes - self._head_bytes
                if room <= 0:
                    self._refuse_in_turn(self._head_too_large())
                    return
                piece, data = data[:room], data[room:]
                self._head_bytes += len(piece)
            else:
                piece, data = data, b""
            if not self._feed(piece):
                return
        if self._reading_head and self._head_bytes and self._head_timer is None:
            # Part of a head came and the rest did not: it is timed from now. (A
            # head that came whole, as nearly every one does, arms no timer: one
            # armed after each response and cancelled with the next head cost ~1.5%
            # of a response-cache hit's CPU. Until a byte comes, an idle
            # connection is uvicorn's keep-alive timeout's.)
            self._await_head()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_count = 0
        self._head_counted, self._fresh_piece = self._fresh_piece, False
        self._head_seen = 0

    def on_url(self, url: bytes) -> None:
        self._head_seen += len(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_seen += len(name) + len(value) + 4
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._refusal = (
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"a request has at most {self.limits.max_headers} header fields",
                "HEADERS_TOO_LARGE",
            )
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self._reading_head = False
        if not self._head_counted and self._head_size() > self.limits.max_header_bytes:
            self._refusal = self._head_too_large()
            raise _Refused
        if self.parser.should_upgrade() and not self._should_upgrade():
            self._upgrade_body = self._declared_body()
        if len(self.connections) > self.limits.max_connections and not self._liveness_probe():
            self._refusal = (
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the server holds {self.limits.max_connections} connections; try again shortly",
                "SERVICE_UNAVAILABLE",
            )
            raise _Refused
        super().on_headers_complete()
        if len(self.pipeline) > MAX_PIPELINED:
            # Nothing can be answered out of turn while a response is under
            # way: drop the queue and the connection (one line in the log).
            self.pipeline.clear()
            running = self._running
            if running is not None and not running.response_complete:
                # Its answer goes nowhere now; without this it would write to
                # the closed transport (a traceback per connection).
                running.disconnected = True
                running.message_event.set()
            log.warning(
                "more than %d pipelined requests unread on one connection: closed (client %s)",
                MAX_PIPELINED,
                self._client_text(),
            )
            self._refused = True  # what still arrives is dropped
            self.transport.close()
            raise _Refused
        if not (self.parser.should_upgrade() and self._should_upgrade()):
            # Timed from the end of this feed, if the body is not complete by then
            # (_feed): most bodies come with their head, and a timer armed and
            # cancelled for each was ~1.5% of a response-cache hit's CPU. An
            # upgraded connection is no longer ours.
            self._body_due = True

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self._running = cycle  # the one being answered; the others wait in the pipeline
        cycle.transport = HeadWithBody(self.transport, cycle)  # type: ignore[assignment]
        super()._start_asgi_task(cycle, app)

    def _liveness_probe(self) -> bool:
        return self.url.partition(b"?")[0] == LIVENESS_PATH and self.parser.get_method() == b"GET"

    def on_message_complete(self) -> None:
        self._body_due = False
        self._cancel_body_timer()
        super().on_message_complete()
        # The next bytes are the next request's head (counted from the next read:
        # :meth:`on_headers_complete` sizes one begun in this one).
        self._reading_head, self._head_bytes = True, 0

    def _head_size(self) -> int:
        """The head's size from what the parser gave: the target, each header's name and
        value as sent, 4 bytes of separators each and 16 for the method and version (a
        lower bound: whitespace before a value is not given; at most one read of it passes)."""
        return self._head_seen + 16

    def _head_too_large(self) -> tuple[HTTPStatus, str, str]:
        return (
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
            f"the request head is over {self.limits.max_header_bytes} bytes",
            "HEADERS_TOO_LARGE",
        )

    # An Upgrade this server does not speak (h2c, …): ignored, as RFC 9110 §7.8 allows.

    def _declared_body(self) -> int:
        """The ``Content-Length`` of a request whose ``Upgrade`` is ignored (0: none).

        llhttp ends such a request at its head and takes what follows for the other
        protocol, so its body is framed here; a chunked one is refused (400).
        """
        length = 0
        for name, value in self.headers:
            if name == b"transfer-encoding":
                self._refusal = (
                    HTTPStatus.BAD_REQUEST,
                    "a request asking to upgrade the connection cannot send a chunked body "
                    "here: send it without Upgrade, or with a Content-Length",
                    "BAD_REQUEST",
                )
                raise _Refused
            if name == b"content-length":
                length = int(value)  # digits: llhttp refused anything else
        return length

    def _ignore_upgrade(self, rest: bytes) -> bool:
        """Go on in HTTP/1.1 after llhttp stopped at an ignored upgrade's head: the
        declared body (``rest`` starts it) goes to the request, what follows is parsed."""
        length, self._upgrade_body = self._upgrade_body, 0
        if length:
            cycle = self.cycle
            cycle.more_body = True  # llhttp ended the message; its app has not run yet
            self._reading_head = False
            self._body_left = length
            rest = self._take_body(rest)
            if self._body_left:
                self._body_due = True
                if self._body_timer is None:
                    self._await_body()
                return True
        return self._feed(rest) if rest else True

    def _take_body(self, data: bytes) -> bytes:
        """Up to :attr:`_body_left` bytes of ``data`` to the request as body; the rest."""
        left = self._body_left
        part, rest = (data, b"") if len(data) <= left else (data[:left], data[left:])
        self._body_left = left - len(part)
        if part:
            HttpToolsProtocol.on_body(self, part)  # uvicorn's: kept, flow control, woken
        if not self._body_left:
            self.on_message_complete()
        return rest

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.get_write_buffer_size():
            # Some of the answer waits for the client to read it (its socket buffer
            # is full): below the high-water mark no pause_writing times that.
            self._await_reader()
        if pipelined or self.transport.is_closing():
            return
        if self._deferred is not None:
            self._refuse(*self._deferred)
        elif self._eof:
            self.transport.close()  # half-closed by the client, and all it sent is answered

    def eof_received(self) -> bool | None:  # type: ignore[override]  # asyncio.Protocol's
        """The client half-closed (``shutdown(SHUT_WR)``): whole requests it sent are still
        answered, then the connection closes (uvicorn let the transport close at once,
        and a committed mutation's answer was lost)."""
        self._eof = True
        cycle = self.cycle
        if cycle is None or cycle.more_body:
            return None  # nothing whole to answer (or a body that can no longer come): close
        if cycle.response_complete and not self.pipeline:
            return None  # all answered (a head begun after them never ends)
        return True  # kept open to write; on_response_complete closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()
        self._cancel_send_timer()
        super().connection_lost(exc)

    # The client reading what it is sent.

    def pause_writing(self) -> None:
        super().pause_writing()
        self._await_reader()

    def _await_reader(self) -> None:
        """Time the client's reading: what waits to be sent must shrink within the bound."""
        if self._send_timer is None:
            self._sent_backlog = self._backlog()
            self._send_timer = self.loop.call_later(
                self.limits.send_timeout_s, self._send_timed_out
            )

    def _backlog(self) -> int:
        """Bytes not yet read by the client as far as this side can tell: the transport's
        buffer and, on Linux, the socket's send queue (sent but not acknowledged, or not
        sent: a slow reader frees it a window at a time, long before the kernel takes
        more of the transport's buffer)."""
        waiting = self.transport.get_write_buffer_size()
        sock = self.transport.get_extra_info("socket")
        if sock is not None and _OUTQ is not None:
            queued = array.array("i", [0])
            with contextlib.suppress(OSError, ValueError):
                fcntl.ioctl(sock.fileno(), _OUTQ, queued)
                waiting += queued[0]
        return waiting

    def _cancel_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_timed_out(self) -> None:
        self._send_timer = None
        if not self.transport.get_write_buffer_size():
            return  # all handed to the kernel: the connection's slot is free to close
        backlog = self._backlog()
        if backlog < self._sent_backlog:
            self._await_reader()  # the client reads, however slowly: timed again from now
            return
        log.warning(
            "a client read nothing of its answers for %g s: connection dropped (client %s)",
            self.limits.send_timeout_s,
            self._client_text(),
        )
        self.transport.abort()  # close() would wait to send what it never reads

    def _await_head(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._head_bytes == 0:
            self.transport.close()  # not a byte of a request: nothing to answer
            return
        self._refuse(
            HTTPStatus.REQUEST_TIMEOUT,
            f"the request head did not arrive within {self.limits.head_timeout_s:g} s",
            "REQUEST_TIMEOUT",
        )

    def _await_body(self) -> None:
        self._cancel_body_timer()
        self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_timed_out)

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if self.flow.read_paused:
            # The server stopped reading (the app is behind, or the request is
            # pipelined behind another): the client is not the slow one.
            self._await_body()
            return
        cycle = self.cycle
        if cycle is None or cycle.response_started:
            self.transport.close()  # an answer is under way: a refusal would garble it
            return
        # The app waiting for the body reads http.disconnect; what it sends is dropped.
        cycle.disconnected = True
        cycle.message_event.set()
        self._refuse(
            HTTPStatus.REQUEST_TIMEOUT,
            f"the request body did not arrive within {self.limits.body_timeout_s:g} s",
            "REQUEST_TIMEOUT",
        )

    # Parsing, and refusing.

    def _feed(self, data: bytes) -> bool:
        """Parse ``data``; whether to go on (not refused, failed or upgraded)."""
        try:
            self.parser.feed_data(data)
            if self._body_due and self._body_timer is None:
                self._await_body()
        except httptools.HttpParserUpgrade as upgrade:
            if self._should_upgrade():
                running = self._running
                if self.pipeline or (running is not None and not running.response_complete):
                    # Behind a request not yet answered, its answer went out after the
                    # 101 (inside the WebSocket), and the keep-alive timer armed after
                    # it closed the socket 5 s later. Clients wait for 101 alone.
                    self._refuse_in_turn(
                        (
                            HTTPStatus.BAD_REQUEST,
                            "a WebSocket upgrade must not be pipelined behind another "
                            "request: send it once the answers before it arrived",
                            "BAD_REQUEST",
                        )
                    )
                    return False
                self.handle_websocket_upgrade()
                return False
            # Before, the body went unread and its bytes were parsed as the next
            # request: one request a proxy passed on was answered as two.
            return self._ignore_upgrade(data[upgrade.args[0] :])
        except httptools.HttpParserError as error:
            self._refuse_in_turn(
                self._refusal
                or (
                    HTTPStatus.BAD_REQUEST,
                    f"the request is not valid HTTP/1.1 ({error})",
                    "BAD_REQUEST",
                )
            )
            return False
        return True

    def _refuse_in_turn(self, refusal: tuple[HTTPStatus, str, str]) -> None:
        """:meth:`_refuse` now, or after the whole requests before it are answered."""
        cycle = self.cycle
        running = self._running
        if (
            running is not None
            and not running.response_complete
            and (cycle is None or not cycle.more_body)
        ):
            # Whole requests came before the bad bytes (pipelined): each is
            # answered in turn, then the refusal. Sent now it went out of
            # turn, the answers after it hit a closed stream (a traceback
            # each), and a committed mutation's answer was lost.
            self._deferred = refusal
            self._refused = True  # what still arrives is dropped
            return
        if cycle is not None and not cycle.response_complete and not cycle.response_started:
            # A bad chunk of a body the app is waiting for: it reads
            # http.disconnect, and the client gets its 400, not a bare close.
            cycle.disconnected = True
            cycle.message_event.set()
        self._refuse(*refusal)

    def _client_text(self) -> str:
        """The peer's ``address:port`` for a log line (``-`` when unknown)."""
        return f"{self.client[0]}:{self.client[1]}" if self.client else "-"

    def _refuse(self, status: HTTPStatus, message: str, code: str) -> None:
        """Answer ``status`` with a GraphQL-shaped error and close the connection."""
        self._cancel_head_timer()
        self._cancel_body_timer()
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.disconnected:
            # A pipelined head went wrong while a response is being written:
            # another answer would garble it.
            self.transport.close()
            return
        request_id = new_request_id()
        count_error(code)
        log.warning(
            "%s %s: %s (client %s)",
            status.value,
            status.phrase,
            message,
            self._client_text(),
            extra={"request_id": request_id},
        )
        body = json.dumps({"errors": [{"message": message, "extensions": {"code": code}}]})
        # A HEAD request's answer has no body (its Content-Length says what GET would send).
        sent = b"" if self.parser.get_method() == b"HEAD" else body.encode()
        head = [STATUS_LINE[status.value]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            REQUEST_ID_HEADER.lower().encode() + b": " + request_id.encode() + b"\r\n",
            b"connection: close\r\n\r\n",
            sent,
        ]
        self.transport.write(b"".join(head))
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


class HeadWithBody:
    """The transport one response is written to: its head goes out with its first body bytes.

    uvicorn writes a response's head (status line and headers) as soon as the
    app sends ``http.response.start``, and its body with ``http.response.body``:
    two ``send`` calls, two system calls and often two TCP segments for an
    answer whose bytes were all ready (a response-cache hit, ~13% of its CPU,
    measured with py-spy). This holds the head and writes it together with
    the first body bytes, unless the response is chunked (streamed: a client
    waits for the head before any event comes) or answers ``HEAD`` (no body
    bytes follow to carry it). What is written once the client is gone (the
    transport closing) is dropped, as asyncio's own transports drop it. What
    goes on the wire, and in
    what order, is unchanged: a ``100 Continue`` goes out at once, and a
    close (the app failed between head and body) writes the held head first.
    """

    __slots__ = ("_cycle", "_head", "_transport")

    def __init__(self, transport: asyncio.Transport, cycle: RequestResponseCycle) -> None:
        self._transport = transport
        self._cycle: RequestResponseCycle | None = cycle
        """Until its response starts (then let go)."""
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        transport = self._transport
        if transport.is_closing():
            # The client is gone (a reset read closes the transport before uvicorn
            # hears of it): uvloop raised here, a traceback per aborted download.
            return
        head = self._head
        if head is not None:  # the first body bytes, with the head
            self._head = None
            transport.write(head + data)
            return
        cycle = self._cycle
        if cycle is not None and cycle.response_started:
            # The head. The cycle is let go: every later write is its body, and a
            # cycle and its transport holding each other waited for the garbage
            # collector, whose passes over them paused the loop 20-40 ms (wrk p99).
            # (A 100 Continue is written before the response starts.)
            self._cycle = None
            if not cycle.chunked_encoding and cycle.scope["method"] != "HEAD":
                # Held, unless streamed, or a HEAD answer (no body bytes carry it).
                self._head = data
                return
        transport.write(data)

    def close(self) -> None:
        self._cycle = None
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


def protocol_class(limits: HeadLimits) -> type[BoundedHttpToolsProtocol]:
    """A :class:`BoundedHttpToolsProtocol` bound to ``limits``, for ``uvicorn.Config(http=…)``."""

    class Bounded(BoundedHttpToolsProtocol):
        pass

    Bounded.limits = limits
    return Bounded
