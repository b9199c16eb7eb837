"""Who is connected: the OAuth subject behind each statement the gateway runs now.

Two ways, so that admin_show_processes and show_connections can name the caller:

- PostgreSQL: the read-only transaction also sets `application_name` transaction-locally
  (set_config(..., true), bound, in the same preamble as the identity settings) to
  `mcp-gateway sub=<subject>`, so pg_stat_activity shows who asks while the statement runs, from
  any worker or instance; it ends with the transaction (the pooled session goes back to
  `mcp-gateway`). `subject_of_label` reads it back.
- Every engine: this worker keeps a map (target_id, the server's session id) -> subject while a
  statement runs (`RUNNING`). MariaDB/MySQL have no per-statement label, so admin_show_processes
  annotates their processes from this map: a statement run by another worker process (or another
  instance) of a multi-worker gateway is listed without a subject.

Only OAuth callers are recorded: a static-token call costs one comparison. The token is never
kept, only the subject (bounded).
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator

LABEL_PREFIX = "mcp-gateway sub="
LABEL_CHARS = 63  # PostgreSQL's application_name limit (NAMEDATALEN - 1)
SUBJECT_CHARS = 200  # what the map keeps of a subject


def label_for(subject: str) -> str:
    """The application_name naming the subject: ASCII printable only (PostgreSQL turns the rest
    into '?'), cut to 63 characters with a trailing '~' when cut."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in subject)
    room = LABEL_CHARS - len(LABEL_PREFIX)
    if len(clean) > room:
        clean = clean[: room - 1] + "~"
    return LABEL_PREFIX + clean


def subject_of_label(application_name: str | None) -> str | None:
    """The subject a gateway's application_name names (cut as label_for cuts it); None otherwise."""
    if application_name and application_name.startswith(LABEL_PREFIX):
        return application_name[len(LABEL_PREFIX) :] or None
    return None


class RunningCallers:
    """(target_id, session id) -> the subject running a statement there now, in this worker."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, int], str] = {}

    @contextlib.contextmanager
    def running(self, target_id: str, session_id: int | None, subject: str) -> Iterator[None]:
        if session_id is None:
            yield
            return
        key = (target_id, session_id)
        with self._lock:
            self._running[key] = subject[:SUBJECT_CHARS]
        try:
            yield
        finally:
            with self._lock:
                self._running.pop(key, None)

    def subject(self, target_id: str, session_id: int) -> str | None:
        return self._running.get((target_id, session_id))

    def counts(self) -> list[dict[str, object]]:
        """Statements running now per target and subject, in this worker."""
        with self._lock:
            counted = Counter((target_id, subject) for (target_id, _), subject in self._running.items())
        return [{"target_id": t, "subject": s, "statements": n} for (t, s), n in sorted(counted.items())]


RUNNING = RunningCallers()
