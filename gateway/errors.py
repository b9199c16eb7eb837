"""The gateway's one exception tree, and the codes it puts on the wire.

    GatewayError                 (code INTERNAL)
     +-- InvalidArgument         INVALID_ARGUMENT   bad input from the caller
     |    +-- BadValue           INVALID_ARGUMENT   a database refused a value the caller sent (NUL, a charset it cannot hold)
     +-- LimitExceeded           LIMIT_EXCEEDED     a cap refused the request outright
     +-- NotFound                NOT_FOUND          a named thing does not exist
     +-- Unauthorized            UNAUTHORIZED       missing or wrong credentials
     +-- PermissionDenied        PERMISSION_DENIED  known caller, not allowed (a backend account lacks a privilege, a guard variable is off)
     +-- Unavailable             UNAVAILABLE        a backend, model or handler is down
     +-- DeadlineExceeded        DEADLINE_EXCEEDED  the call ran past its deadline
     +-- Cancelled               CANCELLED          someone stopped the statement (admin_kill_query, the database's own tools)
     +-- ConfigError             INVALID_ARGUMENT   an admin edit failed validation

Tool functions raise these; `gateway.tools` turns them into `isError` tool results and the
protocol layer turns `ProtocolError` into JSON-RPC errors. Driver exceptions are translated
where the driver is called (`raise Unavailable(...) from exc`), so a client only ever sees a
safe message and a stable code; the traceback goes to the log.
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    code = "INTERNAL"

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return error


class InvalidArgument(GatewayError):
    code = "INVALID_ARGUMENT"


class BadValue(InvalidArgument):
    """A database refused a value the caller sent (a NUL byte for PostgreSQL, a character
    MariaDB's catalog cannot hold): what an engine's `translate` says of such a driver error."""


class LimitExceeded(GatewayError):
    code = "LIMIT_EXCEEDED"


class NotFound(GatewayError):
    code = "NOT_FOUND"


class Unauthorized(GatewayError):
    code = "UNAUTHORIZED"


class PermissionDenied(GatewayError):
    code = "PERMISSION_DENIED"


class Unavailable(GatewayError):
    code = "UNAVAILABLE"


class DeadlineExceeded(GatewayError):
    code = "DEADLINE_EXCEEDED"


class Cancelled(GatewayError):
    code = "CANCELLED"


class ConfigError(InvalidArgument):
    """An admin edit (SET, INSERT, LOAD ... TO RUNTIME) that does not validate."""


# JSON-RPC codes used on the wire.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_UNAUTHORIZED = -32001  # ProxySQL's code for a failed bearer check
SERVER_UNAVAILABLE = -32003
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022


class ProtocolError(Exception):
    """A JSON-RPC level failure: answered as `{"error": {...}}`, never as a tool result."""

    def __init__(
        self,
        jsonrpc_code: int,
        message: str,
        *,
        error_code: str = "INVALID_ARGUMENT",
        http_status: int = 200,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.jsonrpc_code = jsonrpc_code
        self.message = message
        self.error_code = error_code
        self.http_status = http_status
        self.data = data

    def to_error(self) -> dict[str, Any]:
        data = {"code": self.error_code}
        if self.data:
            data.update(self.data)
        return {"code": self.jsonrpc_code, "message": self.message, "data": data}
