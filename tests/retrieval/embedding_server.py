"""A real HTTP embedding service on 127.0.0.1 for the provider tests: OpenAI and Ollama routes.

It computes its vectors with whatever function it is given (the tests pass the local model), so a
provider test checks real HTTP, real JSON and real vectors end to end. Knobs let a test script
failures: answer the next requests with given statuses, serve vectors of the wrong width, be slow.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

# Something an upstream error page might contain; tests assert it never reaches an error message.
SECRET_IN_ERROR_BODY = "upstream-secret-7f3a"


@dataclass
class Script:
    fail_statuses: list[int] = field(default_factory=list)  # answered first, one per request, in order
    retry_after: str | None = None  # Retry-After header sent with scripted failures
    dim: int | None = None  # serve only the first `dim` components (simulates a wrong model)
    delay_s: float = 0.0  # sleep before answering
    not_json: bool = False


@dataclass
class Seen:
    path: str
    authorization: str | None
    body: dict[str, Any]


class EmbeddingServer:
    def __init__(self, embed: Callable[[list[str]], np.ndarray]) -> None:
        self.embed = embed
        self.script = Script()
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="embedding-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def reset(self) -> None:
        with self._lock:
            self.script = Script()
            self.requests.clear()

    def answer(self, path: str, authorization: str | None, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        with self._lock:
            self.requests.append(Seen(path, authorization, body))
            script = self.script
            status = script.fail_statuses.pop(0) if script.fail_statuses else 200
        if script.delay_s:
            time.sleep(script.delay_s)
        if status != 200:
            headers = {"Retry-After": script.retry_after} if script.retry_after else {}
            return status, headers, json.dumps({"error": f"boom {SECRET_IN_ERROR_BODY}"}).encode()
        if script.not_json:
            return 200, {}, b"<html>gateway timeout</html>"
        vectors = self.embed(list(body["input"]))
        if script.dim is not None:
            vectors = vectors[:, : script.dim]
        rows = vectors.tolist()
        if path == "/api/embed":
            payload: dict[str, Any] = {"model": body["model"], "embeddings": rows}
        elif path == "/v1/embeddings":
            # Reversed on purpose: clients must order by "index", not by position.
            data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)]
            payload = {"object": "list", "model": body["model"], "data": data[::-1]}
        else:
            return 404, {}, b'{"error": "not found"}'
        return 200, {}, json.dumps(payload).encode()


def _handler_for(server: EmbeddingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            status, headers, payload = server.answer(self.path, self.headers.get("Authorization"), body)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            # The client may have given up first (the timeout test does this on purpose).
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            pass

    return Handler
