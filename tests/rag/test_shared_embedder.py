"""One local embedding model per instance: the supervisor serves it on a Unix socket and the
workers' embedder (backends/retrieval/embeddings/shared.py) sends texts there."""

from __future__ import annotations

import os
import signal
import stat
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from backends.retrieval.embeddings import HashEmbedder, make_embedder
from backends.retrieval.embeddings.shared import SOCKET_ENV, EmbedService, SharedEmbedder
from gateway.errors import InvalidArgument, Unavailable


class Counting(HashEmbedder):
    """A real (hashing) embedder that counts the texts it embedded."""

    def __init__(self) -> None:
        super().__init__(dim=384)
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        if "fail" in texts:
            raise Unavailable("model down")
        return super().embed(texts)


@pytest.fixture()
def service():
    model = Counting()
    served = EmbedService(model)  # type: ignore[arg-type]
    yield served, model
    served.close()


def test_workers_get_the_parents_vectors_over_one_private_socket(service) -> None:
    served, model = service
    assert stat.S_IMODE(os.stat(served.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(served.path.parent).st_mode) == 0o700
    client = SharedEmbedder(served.path)
    texts = ["how do I sort a list", "tab\tand\nnewline", "ünïcödé"]
    assert np.array_equal(client.embed(texts), HashEmbedder(dim=384).embed(texts))
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(client.embed(["x"] * 50))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(r.shape == (50, 384) for r in results)
    assert model.texts == 3 + 8 * 50  # every text embedded once, in the parent
    assert client.embed([]).shape == (0, 384)


def test_errors_stay_errors(service) -> None:
    served, _ = service
    client = SharedEmbedder(served.path)
    with pytest.raises(Unavailable, match="model down"):
        client.embed(["fail"])
    with pytest.raises(InvalidArgument):
        client.embed("a bare string")  # type: ignore[arg-type]
    assert client.embed(["still serving"]).shape == (1, 384)
    served.close()
    with pytest.raises(Unavailable, match="not reachable"):
        SharedEmbedder(served.path).embed(["gone"])


def test_oversized_request_is_refused_not_buffered(service) -> None:
    import socket
    import struct

    served, model = service
    with socket.socket(socket.AF_UNIX) as raw:
        raw.connect(str(served.path))
        raw.sendall(struct.pack(">I", 2**31))
        assert raw.recv(1) == b"E"
    assert model.texts == 0


def test_make_embedder_in_a_worker_uses_the_service(service, monkeypatch) -> None:
    served, _ = service
    monkeypatch.setenv(SOCKET_ENV, str(served.path))
    assert isinstance(make_embedder({"provider": "local"}), SharedEmbedder)
    assert isinstance(make_embedder({"provider": "hash"}), HashEmbedder)  # only the local model is shared


def test_two_workers_embed_with_the_supervisors_one_model() -> None:
    """A real `serve --workers 2` with the local model: queries embedded in both workers, yet
    the model is loaded once, by the supervisor (its memory is paid once)."""
    import re
    import time

    from server_process import call_tool, start_gateway

    with start_gateway(workers=2, startup_timeout_s=120) as gw, gw.client(timeout=30) as client:
        pids: set[int] = set()
        deadline = time.monotonic() + 30
        while len(pids) < 2 and time.monotonic() < deadline:  # new connections land on either worker
            with gw.client(timeout=30) as fresh:
                out = call_tool(fresh, gw, "rag", "rag.search_hybrid", {"query": "how do I sort a list", "k": 3})
                assert out["isError"] is False, out
                text = fresh.get("/metrics").text
            pids = {int(p) for p in re.findall(r'^mcp_gateway_process_start_time_seconds\{pid="(\d+)"\}', text, re.M)}
        workers = pids - {gw.process.pid}
        assert len(workers) == 2, pids
        assert call_tool(client, gw, "rag", "rag.search_hybrid", {"query": "tuples", "k": 1})["isError"] is False
        log = gw.log_path.read_text()
        assert log.count("serving the local embedding model to the workers") == 1, log

        def rss_mib(pid: int) -> float:
            with open(f"/proc/{pid}/status") as status:
                return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))

        def libraries(pid: int) -> set[str]:
            return {line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if ".so" in line}

        # The model's session (~72 MiB) lives in the supervisor only, and the supervisor holds
        # none of the app (gateway/supervisor.py): no pydantic, no usearch, no apsw. Measured:
        # supervisor 146, workers 82-86 MiB each; with the whole app in the supervisor: 200 and
        # 85; when each worker loaded its own model: supervisor 153, workers 328.
        parent, worker_rss = rss_mib(gw.process.pid), [rss_mib(pid) for pid in workers]
        assert max(worker_rss) < parent - 40, (parent, worker_rss)
        in_supervisor = libraries(gw.process.pid)
        assert any("onnxruntime" in lib for lib in in_supervisor), in_supervisor
        app_only = [lib for lib in in_supervisor if any(name in lib for name in ("pydantic_core", "usearch", "apsw"))]
        assert app_only == [], app_only

        # Issue 30: a worker loads no library it does not use. Its embedder is the supervisor's,
        # so onnxruntime and tokenizers never load (nor does the fork server they are forked
        # from); no target uses DuckDB or PostgreSQL and no token is an OAuth JWT, so neither
        # driver nor cryptography loads. A shared library a worker has imported is in its maps.
        for pid in workers:
            unwanted = [lib for lib in libraries(pid) if any(name in lib for name in UNUSED_IN_WORKERS)]
            assert unwanted == [], (pid, unwanted)
            # forked by the fork server (gateway/worker_preload.py), not spawned by the supervisor
            with open(f"/proc/{pid}/stat") as stat:
                parent_of_worker = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{parent_of_worker}/cmdline") as cmdline:
                assert "multiprocessing.forkserver" in cmdline.read(), parent_of_worker
        assert "MALLOC_ARENA_MAX=2" in Path(f"/proc/{min(workers)}/environ").read_text().split("\0")

        # A worker that dies is replaced from the fork server too, counted, and embeds as before.
        os.kill(min(workers), signal.SIGKILL)
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            try:  # a fresh connection each time: a kept-alive one may have been the killed worker's
                with gw.client(timeout=10) as fresh:
                    text = fresh.get("/metrics").text
            except httpx.TransportError:
                text = ""
            if "mcp_gateway_worker_restarts_total 1.0" in text:
                break
            time.sleep(0.5)
        assert "mcp_gateway_worker_restarts_total 1.0" in text, text[-2000:]
        for _ in range(4):  # fresh connections: either worker, the replacement included
            with gw.client(timeout=30) as fresh:
                out = call_tool(fresh, gw, "rag", "rag.search_hybrid", {"query": "dictionaries", "k": 1})
                assert out["isError"] is False, out


# Shared objects of libraries a worker of the test above does not use (/proc/<pid>/maps paths).
UNUSED_IN_WORKERS = ("onnxruntime", "/tokenizers/", "_duckdb", "psycopg_binary", "psycopg_c", "/cryptography/")
