"""Streamable HTTP, JSON responses: the HTTP half of `POST /mcp/<endpoint>`.

Order of checks, cheapest and least revealing first (Host and Origin were checked by gateway.app
for every path, gateway.host_guard): endpoint exists (404), method is POST
(405; OPTIONS answered), bearer token (401), content type (415), body
size (413, before any parsing), JSON (-32700), protocol-version header (400), batch rules
(400/-32600). Then each message goes to the `Dispatcher`.

`McpTransport` is a plain ASGI app (gateway.app sends it every `/mcp/<name>` request): it
reads the headers from the scope and the body from `receive` and sends its answer itself.
Starlette's routing, middleware and Request/Response objects around it cost ~20 of the ~50 us
of Python the gateway spent per call (bench/gateway_overhead.py), and none of their features
apply to one JSON-RPC POST.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import parse_qsl

import anyio
import orjson
from starlette.types import Receive, Scope, Send

from gateway import auth, oauth
from gateway.errors import INVALID_REQUEST, PARSE_ERROR, SERVER_UNAUTHORIZED, SERVER_UNAVAILABLE, ProtocolError
from gateway.metrics import Metrics
from gateway.protocol import ALL_VERSIONS, Dispatcher, Endpoint, Envelope
from gateway.services import Services

CORS_HEADERS = "Authorization, Content-Type, Accept, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Mcp-Session-Id"
PREFIX = "/mcp/"  # gateway.app sends `/mcp/<name>` (one non-empty segment) here


class Reply(NamedTuple):
    """One HTTP answer: a JSON body (content type and length added on sending) or none."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    answer: bool = False  # the dispatcher's answer (its size is a response-size sample), not a transport error

    async def send(self, send: Send) -> None:
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers] if self.headers else []
        if self.body:
            headers += ((b"content-type", b"application/json"), (b"content-length", str(len(self.body)).encode()))
        elif self.status != 204:  # 204 carries no length, as HTTP says
            headers.append((b"content-length", b"0"))
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


class _ClientGone(Exception):
    """The client disconnected before its body arrived: nobody is left to answer."""


def _rpc_error(status: int, jsonrpc_code: int, message: str, error_code: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    error = ProtocolError(jsonrpc_code, message, error_code=error_code).to_error()
    return Reply(status, orjson.dumps({"jsonrpc": "2.0", "id": None, "error": error}), headers)


def refusal_reply(status: int, message: str) -> Reply:
    """A request refused before it reaches any endpoint (gateway.host_guard: Host 421, Origin 403)."""
    return _rpc_error(status, INVALID_REQUEST, message, "UNAUTHORIZED")


def not_found_body(path: str, endpoints: list[str]) -> bytes:
    """The 404 body for paths that are no MCP endpoint (gateway.app's catch-all)."""
    return _rpc_error(
        404,
        INVALID_REQUEST,
        f"no MCP endpoint at {path[:200]}; POST to /mcp/<endpoint>, one of: {', '.join(endpoints)}",
        "NOT_FOUND",
    ).body


class McpTransport:
    def __init__(self, services: Services, endpoints: dict[str, Endpoint], dispatcher: Dispatcher, metrics: Metrics) -> None:
        self.services = services
        self.endpoints = endpoints
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.verifier = oauth.Verifier()  # the issuer's keys and validated access tokens, per worker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope["path"][len(PREFIX) :]
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            reply = _rpc_error(
                404, INVALID_REQUEST, f"no MCP endpoint /mcp/{name}; known: {', '.join(self.endpoints)}", "NOT_FOUND"
            )
            await reply.send(send)
            return
        # ASGI servers hand header names over lowercased; of a repeated header the last counts.
        # Only the values used are decoded.
        headers: dict[bytes, bytes] = dict(scope["headers"])
        client = scope["client"][0] if scope.get("client") else "unknown"
        request_bytes = -1
        refusal = self._refusal(scope, endpoint, headers, client)
        if isinstance(refusal, _KeysNeeded):  # an access token whose issuer keys must be fetched first
            await anyio.to_thread.run_sync(self.verifier.keys.refresh, oauth.config(self.services.runtime))
            refusal = self._refusal(scope, endpoint, headers, client, retried=True)
        caller = None
        if isinstance(refusal, auth.Admission):  # admitted with an access token
            caller = refusal.caller
            refusal = refusal.token
        if isinstance(refusal, str):  # admitted, with this token
            limit: int = self.services.runtime.variables["mcp-max_request_bytes"]
            try:
                body = await _read_body(receive, headers.get(b"content-length"), limit)
            except _ClientGone:
                return
            if body is None:
                reply = _rpc_error(
                    413, INVALID_REQUEST, f"request body exceeds mcp-max_request_bytes ({limit})", "LIMIT_EXCEEDED"
                )
            else:
                request_bytes = len(body)
                version = headers.get(b"mcp-protocol-version")
                version_text = None if version is None else version.decode("latin-1")
                reply = await self._answer(body, Envelope(endpoint, version_text, headers, client, refusal, caller))
        else:
            reply = refusal
        self.metrics.exchange(name, reply.status, request_bytes, len(reply.body) if reply.answer else -1)
        await reply.send(send)

    def _refusal(
        self, scope: Scope, endpoint: Endpoint, headers: dict[bytes, bytes], client: str, *, retried: bool = False
    ) -> Reply | str | auth.Admission | _KeysNeeded:
        """Everything decided before the body is read: Origin, method, token, switch, content type.
        The refusal to send, or the caller's token when it is admitted (its Admission for an OAuth
        access token; _KeysNeeded when the issuer's keys must be fetched before deciding)."""
        runtime = self.services.runtime
        variables = runtime.variables  # Runtime.var, minus a call per lookup
        origin_bytes = headers.get(b"origin")  # already checked, with Host, by gateway.host_guard
        origin = None if origin_bytes is None else origin_bytes.decode("latin-1")
        method = scope["method"]
        if method == "OPTIONS":
            cors = [
                ("Allow", "POST, OPTIONS"),
                ("Access-Control-Allow-Methods", "POST, OPTIONS"),
                ("Access-Control-Allow-Headers", CORS_HEADERS),
                ("Access-Control-Max-Age", "600"),
            ]
            if origin is not None:
                cors += [("Access-Control-Allow-Origin", origin), ("Vary", "Origin")]
            return Reply(204, headers=tuple(cors))
        if method != "POST":
            return _rpc_error(
                405,
                INVALID_REQUEST,
                "only POST is served on MCP endpoints (no server-initiated stream)",
                "INVALID_ARGUMENT",
                (("Allow", "POST, OPTIONS"),),
            )
        query: dict[str, str] = {}
        if variables["mcp-allow_query_token"]:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        authorization = headers.get(b"authorization")
        host_bytes = headers.get(b"host") if variables["mcp-oauth_issuer"] else None  # only OAuth needs it
        host = None if host_bytes is None else host_bytes.decode("latin-1")
        admission = auth.check_endpoint(
            endpoint.name,
            None if authorization is None else authorization.decode("latin-1"),
            query,
            runtime,
            verifier=self.verifier,
            host=host,
        )
        failure, token = admission.failure, admission.token
        if failure == auth.KEYS_NEEDED:
            if not retried:
                return _KEYS_NEEDED
            admission = auth.Admission(
                "jwks_unavailable",
                refusal=oauth.OAuthRefusal(401, "invalid_token", "jwks_unavailable", "the issuer's signing keys are unavailable"),
            )
            failure = admission.failure
        if failure is not None:
            self.metrics.auth_failed(endpoint.name, failure, client)
            if self.services.evidence is not None:
                self.services.evidence.event("auth_failure", endpoint=endpoint.name, client=client)
            if failure == "no_token_configured":
                message = "this endpoint has no token configured and refuses every call"
            elif admission.refusal is not None:
                message = admission.refusal.description
            else:
                message = "missing or invalid bearer token"
            cfg = oauth.config(runtime) if variables["mcp-oauth_issuer"] else None
            challenge = oauth.challenge(endpoint.name, cfg, oauth.trusted_host(host, runtime), admission.refusal)
            status = admission.status
            return _rpc_error(
                status,
                SERVER_UNAUTHORIZED,
                message,
                "UNAUTHORIZED" if status == 401 else "PERMISSION_DENIED",
                (("WWW-Authenticate", challenge),),
            )
        if not variables["mcp-enabled"]:
            return _rpc_error(503, SERVER_UNAVAILABLE, "MCP is disabled (mcp-enabled=false)", "UNAVAILABLE")
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if content_type != b"application/json":
            return _rpc_error(415, INVALID_REQUEST, "Content-Type must be application/json", "INVALID_ARGUMENT")
        if admission.caller is not None:
            return admission  # an access token: its caller is the identity, it is no static token to track
        self.services.token_use.seen(endpoint.name, token)  # last-used, written by the periodic flush
        return token

    async def _answer(self, body: bytes, env: Envelope) -> Reply:
        """Parse the body and dispatch its message (or batch)."""
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _rpc_error(200, PARSE_ERROR, "request body is not valid JSON", "INVALID_ARGUMENT")
        header_version = env.header_version
        if header_version is not None and header_version not in ALL_VERSIONS:
            return _rpc_error(
                400,
                INVALID_REQUEST,
                f"unsupported MCP-Protocol-Version {header_version!r}; supported: {', '.join(ALL_VERSIONS)}",
                "INVALID_ARGUMENT",
            )
        if env.caller is not None:
            refused = self._tool_scope_refusal(message, env)
            if refused is not None:
                return refused
        if isinstance(message, list):
            if header_version not in (None, "2025-03-26"):
                return _rpc_error(400, INVALID_REQUEST, "batches are not allowed after protocol 2025-03-26", "INVALID_ARGUMENT")
            if not message:
                return _rpc_error(200, INVALID_REQUEST, "empty batch", "INVALID_ARGUMENT")
            answers = [a for a in [await self.dispatcher.dispatch(m, env) for m in message] if a is not None]
            return Reply(200, orjson.dumps(answers), answer=True) if answers else Reply(202)
        answer = await self.dispatcher.dispatch(message, env)
        if answer is None:
            return Reply(202)
        status = 400 if "error" in answer and answer["error"]["code"] in (-32020, -32022) else 200
        return Reply(status, orjson.dumps(answer), answer=True)

    def _tool_scope_refusal(self, message: object, env: Envelope) -> Reply | None:
        """403 insufficient_scope for a tools/call (or a batch holding one) whose tool needs a scope
        the access token lacks (mcp-oauth_tool_scopes): refused before anything runs."""
        runtime = self.services.runtime
        cfg = oauth.config(runtime)
        if not cfg.tool_scopes or env.caller is None:
            return None
        handler = env.endpoint.handler
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict) or item.get("method") != "tools/call" or not isinstance(item.get("params"), dict):
                continue
            name = item["params"].get("name")
            spec = handler.find_tool(name) if isinstance(name, str) else None
            if spec is None:
                continue
            try:
                self.verifier.check_tool(env.caller, env.endpoint.name, spec.name, cfg)
            except oauth.OAuthRefusal as refusal:
                self.metrics.auth_failed(env.endpoint.name, refusal.reason, env.client)
                host = env.headers.get(b"host")
                challenge = oauth.challenge(
                    env.endpoint.name, cfg, oauth.trusted_host(None if host is None else host.decode("latin-1"), runtime), refusal
                )
                return _rpc_error(
                    403, SERVER_UNAUTHORIZED, refusal.description, "PERMISSION_DENIED", (("WWW-Authenticate", challenge),)
                )
        return None


class _KeysNeeded:
    """The answer of `_refusal` when the issuer's keys must be fetched (in a thread) first."""


_KEYS_NEEDED = _KeysNeeded()


async def _read_body(receive: Receive, declared: bytes | None, limit: int) -> bytes | None:
    """The request body, or None when it exceeds `limit` (a declared length is checked before
    reading; a chunked body is counted as it arrives)."""
    if declared is not None:
        try:
            if int(declared) > limit:
                return None
        except ValueError:
            return None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        if not message.get("more_body", False):
            if not chunks:
                return chunk
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)
