"""Token rotation under load on a two-worker gateway: clients keep calling with the old token
while it is rotated and then revoked; no call fails before the revoke, every call sent after
the revoke answered gets 401, whichever worker serves it."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from server_process import GatewayProcess, post_rpc, start_gateway

from admin.support import audit_table_text, error_of, ok
from gateway import sqlite
from gateway.tokens import fingerprint

CALLERS = 3


def _hammer(gateway: GatewayProcess, token: str, stop: threading.Event, log: list[tuple[float, float, int]]) -> None:
    """Call get_config until told to stop; a new connection every 5 calls spreads them over workers."""
    while not stop.is_set():
        with gateway.client() as http:
            for _ in range(5):
                sent = time.monotonic()
                try:
                    status = post_rpc(
                        http,
                        gateway,
                        "config",
                        "tools/call",
                        {"name": "get_config", "arguments": {"variable_name": "mcp-port"}},
                        token=token,
                    ).status_code
                except httpx.HTTPError:
                    status = -1
                log.append((sent, time.monotonic(), status))


@pytest.mark.slow
def test_rotation_under_load_never_fails_before_the_revoke_and_always_after() -> None:
    with start_gateway(workers=2) as gateway:
        old = gateway.tokens["config"]
        log: list[tuple[float, float, int]] = []
        stop = threading.Event()
        callers = [threading.Thread(target=_hammer, args=(gateway, old, stop, log)) for _ in range(CALLERS)]
        for caller in callers:
            caller.start()
        try:
            with gateway.client() as admin:
                time.sleep(0.5)
                rotated = ok(admin, gateway, "admin", "admin.rotate_token", {"endpoint": "config"})
                assert rotated["valid_tokens"] == 2 and rotated["workers_applied"] == rotated["workers"] == 2
                new = rotated["token"]
                assert rotated["fingerprint"] == fingerprint(new) != fingerprint(old)
                time.sleep(0.5)  # the old token keeps working meanwhile
                with gateway.client() as fresh:
                    ok(fresh, gateway, "config", "get_config", {"variable_name": "mcp-port"}, token=new)
                listed = ok(admin, gateway, "admin", "admin.list_tokens", {"endpoint": "config"})["tokens"]
                by_fp = {t["fingerprint"]: t for t in listed}
                assert set(by_fp) == {fingerprint(old), fingerprint(new)}
                assert by_fp[fingerprint(new)]["created_at"] and by_fp[fingerprint(new)]["created_by"] == fingerprint(
                    gateway.tokens["admin"]
                )
                assert old not in str(listed) and new not in str(listed)
                revoke_sent = time.monotonic()
                revoked = ok(
                    admin, gateway, "admin", "admin.revoke_token", {"endpoint": "config", "fingerprint": fingerprint(old)}
                )
                revoke_done = time.monotonic()
                assert revoked["valid_tokens"] == 1 and revoked["workers_applied"] == revoked["workers"] == 2
                time.sleep(0.7)
        finally:
            stop.set()
            for caller in callers:
                caller.join(timeout=10)
        before = [status for sent, answered, status in log if answered < revoke_sent]
        after = [status for sent, answered, status in log if sent > revoke_done]
        assert len(before) > 20 and len(after) > 10, (len(before), len(after))
        assert set(before) == {200}, sorted(set(before))
        assert set(after) == {401}, sorted(set(after))
        print(f"{len(before)} calls before the revoke (all 200), {len(after)} after it (all 401)")

        with gateway.client() as admin:
            ok(admin, gateway, "config", "get_config", {"variable_name": "mcp-port"}, token=new)
            last = error_of(
                admin, gateway, "admin", "admin.revoke_token", {"endpoint": "config", "fingerprint": fingerprint(new)}
            )
            assert last["code"] == "INVALID_ARGUMENT" and "only token" in last["message"]
            unknown = error_of(admin, gateway, "admin", "admin.revoke_token", {"endpoint": "config", "fingerprint": "abcdef"})
            assert unknown["code"] == "NOT_FOUND"
            time.sleep(1.2)  # last-used is written with the periodic flush
            listed = ok(admin, gateway, "admin", "admin.list_tokens", {})["tokens"]
            config_tokens = [t for t in listed if t["endpoint"] == "config"]
            assert [t["fingerprint"] for t in config_tokens] == [fingerprint(new)] and config_tokens[0]["last_used_at"]
            assert len({t["endpoint"] for t in listed}) == 7
            rows = ok(admin, gateway, "admin", "admin.audit", {"limit": 50})["rows"]
        actions = [(r["action"], r["outcome"]) for r in rows]
        assert ("admin.rotate_token", "ok") in actions and ("admin.revoke_token", "ok") in actions
        assert ("admin.revoke_token", "INVALID_ARGUMENT") in actions
        stored = audit_table_text(gateway.data_dir)
        log_text = gateway.log_path.read_text(errors="replace")
        for token in (old, new):
            assert token not in stored and token not in log_text
        # Written to the disk layer too (what a start loads): a restart neither loses the new token nor revives the old one.
        disk = sqlite.connect(gateway.data_dir / "disk.db", readonly=True)
        try:
            saved = sqlite.scalar(
                disk, "SELECT variable_value FROM global_variables WHERE variable_name = 'mcp-config_endpoint_auth'"
            )
        finally:
            disk.close()
        assert saved == new
