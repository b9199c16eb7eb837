"""One search's caps and deadline (`Call`), read from the rag-* runtime variables.

A cap that refuses a request outright raises LimitExceeded (an oversized query: cutting it would
change its meaning); a cap that trims a result sets `truncated` (k above rag-k_max, candidates
above rag-candidates_max). rag-timeout_ms bounds the whole call (RagHandler.timeout_variable:
the tool base sets the call's deadline from it), and SQLite statements are interrupted by a
progress handler once it passes. Fitting a response into rag-response_max_bytes is the tools'
(handlers/rag/limits.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import apsw

from gateway.call import CallContext
from gateway.errors import DeadlineExceeded, LimitExceeded
from gateway.runtime import Runtime

# SQLite calls the progress handler every this many VM instructions (~ tens of microseconds).
_PROGRESS_STEPS = 2000


@dataclass(frozen=True)
class Caps:
    k_max: int
    candidates_max: int
    query_max_bytes: int
    response_max_bytes: int
    timeout_ms: int

    @classmethod
    def of(cls, runtime: Runtime) -> Caps:
        return cls(
            k_max=runtime.var("rag-k_max"),
            candidates_max=runtime.var("rag-candidates_max"),
            query_max_bytes=runtime.var("rag-query_max_bytes"),
            response_max_bytes=runtime.var("rag-response_max_bytes"),
            timeout_ms=runtime.var("rag-timeout_ms"),
        )


class Call:
    """One tool call's bookkeeping: its caps, start time, deadline, and whether any cap trimmed the result."""

    def __init__(self, caps: Caps, *, deadline: float) -> None:
        self.caps = caps
        self.started = time.monotonic()
        self.deadline = deadline
        self.truncated = False

    @classmethod
    def of(cls, ctx: CallContext) -> Call:
        """The call's caps from its runtime, under the deadline the tool base gave it."""
        return cls(Caps.of(ctx.runtime), deadline=ctx.deadline)

    def ms(self) -> float:
        return round((time.monotonic() - self.started) * 1000, 3)

    def clamp(self, value: int, cap: int) -> int:
        if value > cap:
            self.truncated = True
            return cap
        return value

    def check_query(self, text: str, *, name: str = "query") -> None:
        size = len(text.encode("utf-8"))
        if size > self.caps.query_max_bytes:
            raise LimitExceeded(f"{name} is {size} bytes; rag-query_max_bytes allows {self.caps.query_max_bytes}")

    def check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise DeadlineExceeded(f"the search ran past rag-timeout_ms ({self.caps.timeout_ms} ms)")

    @contextmanager
    def sqlite_deadline(self, conn: apsw.Connection) -> Iterator[None]:
        """Interrupt any statement on `conn` that is still running when the deadline passes."""
        deadline = self.deadline
        conn.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_STEPS)
        try:
            yield
        except apsw.InterruptError as exc:
            raise DeadlineExceeded(f"the search ran past rag-timeout_ms ({self.caps.timeout_ms} ms)") from exc
        finally:
            conn.set_progress_handler(None)
            if conn.in_transaction:  # a read snapshot cut short by the interrupt: release it
                conn.execute("ROLLBACK")
        self.check_deadline()
