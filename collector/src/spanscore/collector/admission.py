"""Admission: who may send an export, and how much the collector holds for it at once.

Every limit that protects the collector from its clients is decided here, before any work is
done on a request, and every refusal is an `Outcome` with OTLP's codes: the retryable ones
(UNAVAILABLE, RESOURCE_EXHAUSTED, with a delay to retry after) when the collector is busy or
stopping, the final ones (UNAUTHENTICATED) when the client is wrong.

- The bearer token (`authorized`): compared in constant time; none configured lets all in.
- The receive budget (`receiving`, `max_receiving_bytes`): the bytes of request bodies being
  received, all requests together. An HTTP body is read a piece at a time, each piece reserved
  first, so a slow client holds only what it has sent.
- The client deadline (`deadlines`, `client_timeout_s`): one thread cuts the read side of a
  client that has not sent its body (or finished its TLS handshake) in time.
- The decoding slots (`admit` / `release`, `max_concurrent_requests`): taken once a body has
  arrived, never while it is being received, so a slow client never holds one.

A `Body` is let go as soon as it is decoded: a request waiting for its commit holds rows in
the write queue (bounded there), not its bytes.
"""

from __future__ import annotations

import contextlib
import heapq
import hmac
import socket
import threading
import time
from dataclasses import dataclass

from google.rpc import code_pb2

from . import otlp
from .stats import Stats


@dataclass
class Outcome:
    """How an export ended, in protocol-neutral terms."""

    code: int  # google.rpc.Code
    message: str = ""
    rejected: int = 0
    retry_after_s: float | None = None
    body: bytes | None = None  # the success response, encoded for the request's format

    def __post_init__(self) -> None:
        self.message = otlp.client_message(self.message)


class ByteBudget:
    """Bytes the collector may hold for one purpose at once; `take` refuses past the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n


class Body:
    """A request body that is let go as soon as it is decoded.

    Handlers wait for the commit after decoding; a waiting handler that kept its body made
    memory grow with the number of waiting requests (1.4 GiB for 148 queued rows), whatever
    the write queue's limits. `take()` hands the bytes over once; `close()` gives back the
    receive budget they held (idempotent).
    """

    def __init__(self, data: bytes = b"", budget: ByteBudget | None = None) -> None:
        self.parts: list[bytes] = [data] if data else []
        self.size = len(data)
        self._budget = budget
        self._held = 0

    def reserve(self, n: int) -> bool:
        if self._budget is not None:
            if not self._budget.take(n):
                return False
            self._held += n
        return True

    def append(self, chunk: bytes, reserved: int) -> None:
        """Keep `chunk`, read into `reserved` bytes of budget (the rest is given back)."""
        if self._budget is not None and reserved > len(chunk):
            self._budget.give(reserved - len(chunk))
            self._held -= reserved - len(chunk)
        if chunk:
            self.parts.append(chunk)
            self.size += len(chunk)

    def take(self) -> bytes:
        data = self.parts[0] if len(self.parts) == 1 else b"".join(self.parts)
        self.parts = []
        return data

    def close(self) -> None:
        self.parts = []
        if self._budget is not None and self._held:
            self._budget.give(self._held)
            self._held = 0


class Deadlines:
    """Cuts the connections of clients that are too slow: one thread watches them all.

    A client sending its body at 1 byte per 10 s, or opening a TLS connection and saying
    nothing, passes every per-read timeout and would hold its thread and its bytes as long as
    it liked. At the deadline the read side of its socket is shut down: the blocked read
    returns, and the handler can still answer.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadlines.Watch]] = []
        self._cond = threading.Condition()
        self._seq = 0
        self._closed = False
        self._compact_at = 4096

    class Watch:
        __slots__ = ("expired", "finished", "sock")

        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock
            self.finished = False
            self.expired = False

        def finish(self) -> bool:
            """Stop watching; whether the deadline had passed (then the read side is shut)."""
            self.finished = True
            return self.expired

    def watch(self, sock: socket.socket, seconds: float) -> Deadlines.Watch:
        watch = Deadlines.Watch(sock)
        deadline = time.monotonic() + seconds
        with self._cond:
            if len(self._heap) >= self._compact_at:
                # Most watches finish long before their deadline; drop them in one pass now
                # and then, or the heap would hold every request of the last client_timeout_s.
                self._heap = [entry for entry in self._heap if not entry[2].finished]
                heapq.heapify(self._heap)
                self._compact_at = max(4096, 2 * len(self._heap))
            self._seq += 1
            # The thread sleeps until the earliest deadline: wake it only for an earlier one.
            wake = not self._heap or deadline < self._heap[0][0]
            heapq.heappush(self._heap, (deadline, self._seq, watch))
            if wake:
                self._cond.notify()
        return watch

    def run(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                while self._heap and (self._heap[0][0] <= now or self._heap[0][2].finished):
                    _, _, watch = heapq.heappop(self._heap)
                    if not watch.finished:
                        watch.expired = True
                        with contextlib.suppress(OSError):
                            # The plain socket's method: SSLSocket.shutdown would also drop
                            # TLS, and the answer would go out unencrypted.
                            socket.socket.shutdown(watch.sock, socket.SHUT_RD)
                self._cond.wait(self._heap[0][0] - now if self._heap else None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()


class Admission:
    """The token, the receive budget, the client deadline and the decoding slots of one
    collector. Refuses everything until `open()` and after `close()`."""

    def __init__(
        self,
        token: str | None,
        max_concurrent_requests: int,
        max_receiving_bytes: int,
        stats: Stats,
    ) -> None:
        self._token = token
        self._slots = threading.BoundedSemaphore(max_concurrent_requests)
        self.receiving = ByteBudget(max_receiving_bytes)
        self.deadlines = Deadlines()
        self.stats = stats
        self._open = False

    def open(self) -> None:
        """The collector can decode and commit: admit exports from now on."""
        self._open = True

    def close(self) -> None:
        """The collector is stopping: refuse every export from now on (retryable)."""
        self._open = False

    def authenticated(self, header: str | None) -> bool:
        """A token is configured and `header` carries it (stricter than `authorized`)."""
        return self._token is not None and self.authorized(header)

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header or not header.lower().startswith("bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self._token.encode())

    def admit(self) -> Outcome | None:
        """Take one of the `max_concurrent_requests` decoding slots, or say why not.

        A slot is taken once the body has arrived (HTTP bodies are received under
        `max_receiving_bytes` and `client_timeout_s` instead), so a slow client never holds
        one. Release with `release()`.
        """
        if not self._open:
            self.stats.add("refused_shutting_down")
            return Outcome(code_pb2.UNAVAILABLE, "the collector is shutting down", retry_after_s=5)
        if not self._slots.acquire(timeout=1.0):
            self.stats.add("refused_busy")
            return Outcome(
                code_pb2.RESOURCE_EXHAUSTED, "too many concurrent requests", retry_after_s=1
            )
        return None

    def release(self) -> None:
        self._slots.release()
