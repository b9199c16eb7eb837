"""What the gateway knows about its bearer tokens besides the tokens: fingerprints, when each
was created and when it was last used (`mcp_tokens`, schema.sql section `admin_state`).

The tokens themselves stay where auth reads them, the `mcp-<endpoint>_endpoint_auth`
variables (comma separated, so a rotation keeps the old token valid beside the new one).
A fingerprint is the first 12 hex digits of the token's SHA-256: enough to tell tokens apart
and to name one to revoke, useless for guessing it.

Last use is noted in memory on every authenticated request (a dict store, no I/O) and
written with the tool counters' periodic flush, so it costs no write per call.
"""

from __future__ import annotations

import functools
import hashlib
import time
from typing import Any

from gateway import sqlite
from gateway.store import ConfigStore

FINGERPRINT_HEX = 12

_UPSERT_USE = """
INSERT INTO mcp_tokens (endpoint, fingerprint, last_used_at) VALUES (?, ?, ?)
ON CONFLICT(endpoint, fingerprint) DO UPDATE SET last_used_at = MAX(COALESCE(last_used_at, 0), excluded.last_used_at)
"""


@functools.lru_cache(maxsize=256)  # only tokens that authenticated reach it: the configured ones
def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:FINGERPRINT_HEX]


class TokenUse:
    """Per worker: the last time each (endpoint, token) authenticated, until the next flush."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], float] = {}

    def seen(self, endpoint: str, token: str) -> None:
        self._seen[(endpoint, token)] = time.time()  # one dict store on the event loop

    def flush(self, store: ConfigStore) -> None:
        # Runs in a thread while the loop keeps noting uses: swap, then copy in one C call. A use
        # noted into the old dict after the copy is lost, and the token's next request notes it again.
        seen, self._seen = self._seen, {}
        items = list(seen.items())
        if not items:
            return
        conn = store.conn()
        with sqlite.transaction(conn):
            for (endpoint, token), at in items:
                conn.execute(_UPSERT_USE, (endpoint, fingerprint(token), at))


def note_created(store: ConfigStore, endpoint: str, token: str, *, created_by: str) -> str:
    """Record a token the gateway just made; returns its fingerprint."""
    fp = fingerprint(token)
    store.conn().execute(
        "INSERT INTO mcp_tokens (endpoint, fingerprint, created_at, created_by) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(endpoint, fingerprint) DO UPDATE SET created_at = excluded.created_at, created_by = excluded.created_by",
        (endpoint, fp, time.time(), created_by),
    )
    return fp


def forget(store: ConfigStore, endpoint: str, fp: str) -> None:
    store.conn().execute("DELETE FROM mcp_tokens WHERE endpoint = ? AND fingerprint = ?", (endpoint, fp))


def metadata(store: ConfigStore) -> dict[tuple[str, str], dict[str, Any]]:
    """(endpoint, fingerprint) -> {created_at, created_by, last_used_at}."""
    return {(r["endpoint"], r["fingerprint"]): r for r in sqlite.rows(store.conn(), "SELECT * FROM mcp_tokens")}
