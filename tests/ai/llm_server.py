"""A real chat-model HTTP server on 127.0.0.1 for the /mcp/ai tests: OpenAI and Ollama routes.

Replies are scripted per test: a queue of `Reply` items answered in order (status, headers such
as Retry-After, a text the model "says", a raw body for malformed output, a delay), then a
default reply. Every request is recorded (path, headers, JSON body) so a test can check what the
gateway sent — that the prompt carried the schema and never a secret.
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


@dataclass
class Reply:
    text: str = "OK"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None  # sent as is (malformed output)
    delay_s: float = 0.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt_text(self) -> str:
        return "\n".join(str(m.get("content", "")) for m in self.body.get("messages", []))


class LlmServer:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.responder: Callable[[Seen], Reply] | None = None  # used when the queue is empty
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="llm-server", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> LlmServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self.replies = list(replies)
            self.requests.clear()

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.requests.append(seen)
            if self.replies:
                return self.replies.pop(0)
        return self.responder(seen) if self.responder else Reply()


def _body_for(path: str, reply: Reply, request: dict[str, Any]) -> bytes:
    if reply.raw_body is not None:
        return reply.raw_body
    model = request.get("model", "test-model")
    if path.startswith("/api/chat"):
        return json.dumps(
            {
                "model": model,
                "message": {"role": "assistant", "content": reply.text},
                "done": True,
                "prompt_eval_count": 11,
                "eval_count": 7,
            }
        ).encode()
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }
    ).encode()


def _handler_for(server: LlmServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers.get("content-length", "0"))
            raw = self.rfile.read(length)
            try:
                request = json.loads(raw or b"{}")
            except ValueError:
                request = {}
            if self.path not in ("/v1/chat/completions", "/api/chat"):
                self._send(404, b'{"error": "no such route"}', {})
                return
            reply = server._next(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, request))
            if reply.delay_s:
                time.sleep(reply.delay_s)
            body = _body_for(self.path, reply, request) if reply.status == 200 else b'{"error": "scripted failure"}'
            self._send(reply.status, body, reply.headers)

        def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                self.wfile.write(body)

    return Handler
