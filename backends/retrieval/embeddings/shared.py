"""One local embedding model per gateway instance, however many workers serve.

Each worker used to load its own all-MiniLM-L6-v2 session (~160 MB serving, more while a sync
runs), so `--workers 2` cost two models. With several workers the supervisor (the parent
process, which already builds the demo corpus with the same model) serves embeddings on a Unix
socket, and the workers' `local` embedder is a `SharedEmbedder` that sends texts there:

    parent   EmbedService  thread: accept; a thread per connection: read a request, run
                           LocalEmbedder.embed (the parent's one model), write the vectors
    worker   SharedEmbedder  model_id/dim of the local model; embed(texts): one persistent
                             connection per thread, request, vectors back

Frames: a request is `>I` length + the texts as a JSON array; an answer is one status byte,
`>I` length and a payload: b"V" and float32 row-major vectors (len(texts) x 384), or b"E" and
the message of the Unavailable the model raised. A request over MAX_REQUEST_BYTES is refused.
The socket lives in a 0700 directory of its own, mode 0600: only the gateway's user can reach it.

`make_embedder` returns a SharedEmbedder when MCP_GATEWAY_EMBED_SOCKET is set (the supervisor
sets it for its workers); a worker that cannot reach the service answers UNAVAILABLE.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import struct
import tempfile
import threading
from pathlib import Path

import numpy as np
import orjson

from backends.retrieval.embeddings.local import LOCAL_DIM, LocalEmbedder
from backends.retrieval.embeddings.normalise import check_texts
from gateway.errors import GatewayError, Unavailable

log = logging.getLogger("mcp_gateway.rag.embeddings")

SOCKET_ENV = "MCP_GATEWAY_EMBED_SOCKET"
MAX_REQUEST_BYTES = 64 * 1024 * 1024
_HEADER = struct.Struct(">I")
_STATUS = struct.Struct(">cI")


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("embedding service connection closed")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class EmbedService:
    """The parent's side: serve `embedder` on a Unix socket until close()."""

    def __init__(self, embedder: LocalEmbedder, directory: Path | None = None) -> None:
        self.embedder = embedder
        self._dir = Path(tempfile.mkdtemp(prefix="mcpgw-embed-", dir=directory))  # 0700
        self.path = self._dir / "embed.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._listener.listen(64)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="embed-service", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="embed-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    (size,) = _HEADER.unpack(_read_exact(conn, _HEADER.size))
                except (ConnectionError, OSError):
                    return
                if size > MAX_REQUEST_BYTES:
                    conn.sendall(_answer(b"E", b"embedding request too large"))
                    return
                try:
                    texts = orjson.loads(_read_exact(conn, size))
                    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                        raise ValueError("texts must be a list of strings")
                    vectors = np.ascontiguousarray(self.embedder.embed(texts), dtype=np.float32)
                    answer = _answer(b"V", vectors.tobytes())
                except (ConnectionError, OSError):
                    return
                except GatewayError as exc:
                    answer = _answer(b"E", exc.message.encode())
                except Exception:  # a bug must not kill the service: the worker gets UNAVAILABLE
                    log.exception("the embedding service failed on a request")
                    answer = _answer(b"E", b"the embedding service failed; see the gateway log")
                try:
                    conn.sendall(answer)
                except OSError:
                    return

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _answer(status: bytes, payload: bytes) -> bytes:
    return _STATUS.pack(status, len(payload)) + payload


class SharedEmbedder:
    """A worker's local embedder: the parent's model, over its socket. Thread-safe (a
    connection per thread, reopened once when the service closed it)."""

    model_id = LocalEmbedder.model_id
    dim = LOCAL_DIM

    def __init__(self, path: str | Path, *, timeout_s: float = 300.0) -> None:
        self.path = str(path)
        self.timeout_s = timeout_s
        self._local = threading.local()

    def load(self) -> SharedEmbedder:
        self.embed(["warm up"])
        return self

    def _connection(self) -> socket.socket:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(self.timeout_s)
            try:
                conn.connect(self.path)
            except OSError as exc:
                conn.close()
                raise Unavailable("the embedding service of this gateway is not reachable") from exc
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)  # a bad input is the caller's INVALID_ARGUMENT, as locally
        if not texts:
            return np.zeros((0, LOCAL_DIM), dtype=np.float32)
        body = orjson.dumps(list(texts))
        request = _HEADER.pack(len(body)) + body
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.sendall(request)
                status, size = _STATUS.unpack(_read_exact(conn, _STATUS.size))
                payload = _read_exact(conn, size)
                break
            except (ConnectionError, OSError) as exc:
                self._drop()
                if attempt == 2:
                    raise Unavailable("the embedding service of this gateway is not reachable") from exc
        if status == b"E":
            raise Unavailable(payload.decode("utf-8", "replace"))
        return np.frombuffer(payload, dtype=np.float32).reshape(len(texts), LOCAL_DIM).copy()


_SERVED_HERE: list[EmbedService] = []  # the service this process runs (the supervisor's)


def shared_socket() -> str | None:
    """The service's socket when this process is a worker of a supervisor that runs one (the
    supervisor itself, the demo build in it included, uses the model directly)."""
    return None if _SERVED_HERE else os.environ.get(SOCKET_ENV) or None


def serve_to_workers(embedder: LocalEmbedder) -> EmbedService:
    """In the supervisor, before it starts its workers: serve `embedder` and tell the workers
    (they inherit the environment) where. Closed when the process exits."""
    import atexit

    service = EmbedService(embedder)
    _SERVED_HERE.append(service)
    os.environ[SOCKET_ENV] = str(service.path)
    atexit.register(service.close)
    log.info("serving the local embedding model to the workers on %s", service.path)
    return service
