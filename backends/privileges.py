"""Layer 4 of read-only SQL: least privilege. `privilege_warnings(target, conn)` says, in plain
words, when a target's account could write or reach server files. `check_target` runs it on a
short-lived connection when MCP PROFILES are loaded, so an admin sees the result in
runtime_mcp_target_profiles.privilege_warnings (and mcp-query_refuse_privileged_targets makes
/mcp/query refuse such a target).

The other layers already keep the gateway's own statements read-only; this catches the
account that would make one mistake fatal (a superuser, FILE, pg_read_server_files, ...).
The check itself only reads catalogs and is rolled back. Failing to check is a warning too.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from backends.targets import Target

log = logging.getLogger("mcp_gateway.query")


def privilege_warnings(target: Target, conn: Any) -> list[str]:
    """Plain-language warnings about what the target's account could do beyond reading (its engine's check)."""
    try:
        return target.engine.privilege_warnings(conn)
    except Exception as exc:  # noqa: BLE001 - a failed check must not take the target down
        log.warning("privilege check of target %s failed: %s", target.target_id, type(exc).__name__)
        with contextlib.suppress(Exception):
            conn.rollback()
        return ["the account's privileges could not be checked"]


CHECK_TIMEOUT_S = 2.0


def check_target(target: Target) -> list[str]:
    """Open one connection to the target (short timeout), check it, close it."""
    try:
        conn = target.engine.connect(target, timeout_s=CHECK_TIMEOUT_S, io_timeout_s=CHECK_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - unreachable now is a warning, not a failed LOAD
        log.info("privilege check of target %s: cannot connect (%s)", target.target_id, type(exc).__name__)
        return ["privileges not checked: the target was unreachable when profiles were loaded"]
    try:
        return privilege_warnings(target, conn)
    finally:
        with contextlib.suppress(Exception):
            conn.close()
