"""Each engine's part of the admin backend tools (backends/engines/admin.py), without a server:
an engine without accounts answers INVALID_ARGUMENT at once, and the grant allowlists hang together."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from backends.engines import ENGINES
from gateway.errors import InvalidArgument


def test_sqlite_has_no_accounts_or_processes() -> None:
    target = SimpleNamespace(target_id="local_file")
    with pytest.raises(
        InvalidArgument, match="target 'local_file' is SQLite: accounts and processes are not supported by sqlite"
    ):
        ENGINES["sqlite"].admin(target)


@pytest.mark.parametrize("name", ["mysql", "pgsql"])
def test_the_allowlists_hang_together(name: str) -> None:
    target = SimpleNamespace(target_id="t", database="db", default_schema="")
    allowlist = ENGINES[name].admin(target).privileges
    assert allowlist.role_level <= allowlist.privileged  # every role-level grant needs admin-allow_privileged_grants
    assert "SELECT" in allowlist.table_level and not allowlist.table_level & allowlist.privileged
    assert all(p == " ".join(p.upper().split()) for p in allowlist.known)  # as the tool normalises what it is given
