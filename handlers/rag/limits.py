"""The caps every /mcp/rag tool enforces, read from runtime variables, and the helpers that apply them.

A cap that refuses a request outright raises LimitExceeded (an oversized query: cutting it would
change its meaning); a cap that trims a result sets `truncated` (k above rag-k_max, candidates
above rag-candidates_max, a response above rag-response_max_bytes). rag-timeout_ms bounds the
whole call (RagHandler.timeout_variable: the tool base sets the call's deadline from it), and
SQLite statements are interrupted by a progress handler once it passes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import apsw
import orjson

from gateway.call import CallContext
from gateway.errors import DeadlineExceeded, LimitExceeded, NotFound
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


def json_size(value: Any) -> int:
    return len(orjson.dumps(value))


def fit_to_bytes(
    items: list[dict[str, Any]], budget_bytes: int, *, text_field: str | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """The longest prefix of `items` whose JSON fits `budget_bytes`; with `text_field`, the first
    item that does not fit is kept with that field cut (so one huge document still returns)."""
    kept: list[dict[str, Any]] = []
    used = 2  # the list's brackets
    for item in items:
        size = json_size(item) + 1  # and its comma
        if used + size <= budget_bytes:
            kept.append(item)
            used += size
            continue
        if text_field and isinstance(item.get(text_field), str):
            room = budget_bytes - used - (size - json_size(item[text_field])) - 16
            if room > 0:
                text = item[text_field].encode("utf-8")[:room].decode("utf-8", errors="ignore")
                # JSON escaping can make the cut text longer than `room`; shrink until it fits.
                while text and used + json_size({**item, text_field: text}) + 1 > budget_bytes:
                    text = text[: int(len(text) * 0.9)]
                if text:
                    kept.append({**item, text_field: text, f"{text_field}_truncated": True})
        return kept, True
    return kept, False


def ids_not_found(kind: str, sent: list[str], distinct: list[str], looked_up: list[str]) -> NotFound:
    """NOT_FOUND for a rag.get_* call none of whose ids is indexed, saying what was sent and
    what rag-k_max left out (before, 1,000 unknown ids read as "none of the 50 ... is in the index")."""
    left_out = len(distinct) - len(looked_up)
    message = f"none of the {len(looked_up)} {kind} looked up is in the index"
    if left_out:
        message += (
            f" ({len(sent)} sent, {len(distinct)} distinct; rag-k_max looks up the first {len(looked_up)}, "
            f"the other {left_out} were not looked up)"
        )
    elif len(sent) != len(distinct):
        message += f" ({len(sent)} sent, {len(distinct)} distinct)"
    details = {
        "sent": len(sent),
        "distinct": len(distinct),
        "looked_up": len(looked_up),
        "not_looked_up": left_out,
        "cap": "rag-k_max",
    }
    return NotFound(message, details=details)
