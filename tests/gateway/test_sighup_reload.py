"""SIGHUP (`systemctl reload mcp-gateway`): a new certificate and a variable changed on disk are
served after the signal, while a client calling throughout sees no failed call."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import threading
import time
from pathlib import Path

import apsw
import httpx
from cert_factory import make_certificate
from server_process import GatewayProcess, call_tool, start_gateway


def served_certificate(gw: GatewayProcess) -> bytes:
    """The DER certificate a new TLS connection gets."""
    host, port = gw.base_url.removeprefix("https://").split(":")
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with (
        socket.create_connection((host, int(port)), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls_sock,
    ):
        return tls_sock.getpeercert(binary_form=True)


def der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def test_sighup_serves_the_new_certificate_and_the_disk_variable_with_no_failed_call(tmp_path: Path):
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    cert, key, _ = make_certificate(tmp_path / "old", days=30)
    new_cert, new_key, _ = make_certificate(tmp_path / "new", days=90)
    bundle = tmp_path / "both.pem"  # the client trusts both, as during a real rotation
    bundle.write_text(cert.read_text() + new_cert.read_text())
    variables = {"mcp-ssl_cert": str(cert), "mcp-ssl_key": str(key), "rag-embedding_provider": "hash"}
    with start_gateway(workers=2, variables=variables, ca_path=bundle) as gw:
        old_der = der(cert)
        assert served_certificate(gw) == old_der
        calls, failures = [0], []
        stop = threading.Event()

        def call_throughout() -> None:
            while not stop.is_set():
                try:
                    with httpx.Client(
                        base_url=gw.base_url, verify=ssl.create_default_context(cafile=str(bundle)), timeout=10
                    ) as client:
                        for _ in range(5):  # a new connection every 5 calls: handshakes before, during and after
                            result = call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-timeout_ms"})
                            if result.get("isError"):
                                failures.append(result)
                            calls[0] += 1
                except Exception as exc:  # noqa: BLE001 - every failure is collected and asserted on
                    failures.append(repr(exc))

        caller = threading.Thread(target=call_throughout)
        caller.start()
        try:
            time.sleep(0.5)
            # The operator replaces the files in place and changes a variable in the disk layer.
            cert.write_text(new_cert.read_text())
            key.write_text(new_key.read_text())
            disk = apsw.Connection(str(gw.data_dir / "disk.db"))
            disk.execute("INSERT OR REPLACE INTO global_variables VALUES ('mcp-timeout_ms', '12345')")
            disk.close()
            time.sleep(0.5)
            assert served_certificate(gw) == old_der  # nothing changes before the signal
            os.kill(gw.process.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while served_certificate(gw) != der(new_cert) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.5)  # both workers have followed the new runtime version
        finally:
            stop.set()
            caller.join(timeout=30)
        assert not failures, failures[:3]
        assert calls[0] >= 20, calls
        seen = set()
        for _ in range(8):  # new connections: both workers answer
            with httpx.Client(base_url=gw.base_url, verify=ssl.create_default_context(cafile=str(bundle)), timeout=10) as client:
                assert served_certificate(gw) == der(new_cert)
                seen.add(
                    call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-timeout_ms"})["structuredContent"][
                        "value"
                    ]
                )
        assert seen == {"12345"}
        assert gw.process.poll() is None  # SIGHUP did not stop the gateway
        log = gw.log_tail(20000)
        assert "SIGHUP: reloaded from disk" in log and "mcp-timeout_ms: 30000 -> 12345" in log, log[-2000:]
        assert "certificate: " in log.split("SIGHUP: reloaded from disk", 1)[1]


def test_sighup_with_one_worker_reloads_and_keeps_serving(tmp_path: Path):
    """With --workers 1 the serving process itself gets the signal; its default action would end it."""
    with start_gateway(workers=1, variables={"rag-embedding_provider": "hash"}) as gw:
        disk = apsw.Connection(str(gw.data_dir / "disk.db"))
        disk.execute("INSERT OR REPLACE INTO global_variables VALUES ('mcp-timeout_ms', '23456')")
        disk.close()
        os.kill(gw.process.pid, signal.SIGHUP)
        deadline, value = time.monotonic() + 10, ""
        with gw.client() as client:
            while value != "23456" and time.monotonic() < deadline:
                time.sleep(0.2)
                value = call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-timeout_ms"})["structuredContent"][
                    "value"
                ]
        assert value == "23456"
        assert gw.process.poll() is None
