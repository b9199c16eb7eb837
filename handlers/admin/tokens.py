"""Bearer tokens without downtime: rotate adds a token beside the old one, revoke removes one.

Tokens stay in the `mcp-<endpoint>_endpoint_auth` variables. A rotation or revocation sets
the variable in memory, loads MCP VARIABLES to runtime (any other pending variable edit goes
with it, as with set_config) and writes that one variable to disk, so a restart neither
loses a new token nor brings a revoked one back. It answers once every worker serves the
change: from then on a revoked token gets 401 everywhere.
"""

from __future__ import annotations

import re
import secrets as random_secrets

from pydantic import Field

from gateway import sqlite, tokens, workers
from gateway.errors import InvalidArgument, LimitExceeded, NotFound
from gateway.store import ConfigStore
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.admin.shared import AuditTrail

MAX_TOKENS_PER_ENDPOINT = 8
ENDPOINT_HELP = "An endpoint name: config, query, admin, ... (each has its mcp-<endpoint>_endpoint_auth)."
TOKEN_VARIABLE = re.compile(r"^mcp-(.+)_endpoint_auth$")


class RotateIn(ToolInput):
    endpoint: str = Field(description=ENDPOINT_HELP)


class RevokeIn(ToolInput):
    endpoint: str = Field(description=ENDPOINT_HELP)
    fingerprint: str = Field(min_length=6, max_length=64, description="The token's fingerprint, as admin.list_tokens shows it.")


class ListTokensIn(ToolInput):
    endpoint: str | None = Field(default=None, description="Only this endpoint's tokens; omitted: all endpoints.")


class TokenInfo(ToolOutput):
    endpoint: str
    fingerprint: str
    created_at: float | None = Field(description="Unix time the gateway made it; null for tokens configured by hand.")
    last_used_at: float | None = Field(description="Unix time of the last authenticated request (written about once a second).")
    created_by: str = Field(description="Fingerprint of the admin token that rotated it in, if it was.")


class ListTokensOut(ToolOutput):
    tokens: list[TokenInfo]


class RotateOut(ToolOutput):
    endpoint: str
    token: str = Field(description="The new token. Shown this once: store it now.")
    fingerprint: str
    valid_tokens: int = Field(description="Tokens the endpoint accepts now (the old ones stay until revoked).")
    workers_applied: int
    workers: int


class RevokeOut(ToolOutput):
    endpoint: str
    fingerprint: str
    valid_tokens: int
    workers_applied: int
    workers: int


def endpoints(store: ConfigStore) -> list[str]:
    """Every endpoint with a token variable, in declaration order."""
    return [m.group(1) for name in store.variables if (m := TOKEN_VARIABLE.match(name))]


def _variable(store: ConfigStore, endpoint: str) -> str:
    known = endpoints(store)
    if endpoint not in known:
        raise InvalidArgument(f"unknown endpoint {endpoint!r}; one of {', '.join(known)}")
    return f"mcp-{endpoint}_endpoint_auth"


class TokenTools:
    def __init__(self, store: ConfigStore, trail: AuditTrail, token_use: tokens.TokenUse) -> None:
        self.store = store
        self.trail = trail
        self.token_use = token_use  # this worker's token uses not yet written (Services.token_use)

    def _current(self, name: str) -> list[str]:
        """The tokens runtime serves now (read from the store: this worker's snapshot may be up to 250 ms old)."""
        raw = sqlite.scalar(
            self.store.conn(), "SELECT variable_value FROM runtime_global_variables WHERE variable_name = ?", (name,)
        )
        return list(self.store.variables[name].parse(raw))

    def _apply(self, name: str, values: list[str]) -> tuple[int, int]:
        """Set the token variable in memory, on disk and in runtime; wait for the workers."""
        store = self.store
        value = ",".join(values)
        store.set_variable(name, value)
        store.set_variable(name, value, layer="disk")
        version = store.load_to_runtime("MCP VARIABLES")
        return workers.wait_applied(store, version)

    @tool("admin.rotate_token", title="Add a fresh token", read_only=False)
    def rotate_token(self, args: RotateIn, ctx: CallContext) -> RotateOut:
        """Add a fresh random token to an endpoint and return it once; the old token stays valid until admin.revoke_token.

        The change reaches every worker and the disk layer before the call answers."""
        name = _variable(self.store, args.endpoint)
        current = self._current(name)
        with self.trail.audited(ctx, {"endpoint": args.endpoint}) as entry:
            if len(current) >= MAX_TOKENS_PER_ENDPOINT:
                raise LimitExceeded(f"/mcp/{args.endpoint} already has {len(current)} tokens; revoke one first")
            token = random_secrets.token_urlsafe(32)
            entry.extra_secrets.append(token)
            fp = tokens.note_created(self.store, args.endpoint, token, created_by=ctx.token_fingerprint)
            applied, alive = self._apply(name, [*current, token])
            entry.after = {"fingerprint": fp, "valid_tokens": len(current) + 1}
        return RotateOut(
            endpoint=args.endpoint,
            token=token,
            fingerprint=fp,
            valid_tokens=len(current) + 1,
            workers_applied=applied,
            workers=alive,
        )

    @tool("admin.revoke_token", title="Revoke a token", read_only=False, destructive=True, idempotent=True)
    def revoke_token(self, args: RevokeIn, ctx: CallContext) -> RevokeOut:
        """Stop accepting one token of an endpoint, named by its fingerprint; every worker refuses it (401) when the call answers.

        The endpoint's last token cannot be revoked: rotate first."""
        name = _variable(self.store, args.endpoint)
        current = self._current(name)
        with self.trail.audited(ctx, {"endpoint": args.endpoint, "fingerprint": args.fingerprint}) as entry:
            matches = [t for t in current if tokens.fingerprint(t).startswith(args.fingerprint.lower())]
            if not matches:
                raise NotFound(f"/mcp/{args.endpoint} has no token with fingerprint {args.fingerprint!r}")
            if len(matches) > 1:
                raise InvalidArgument(f"fingerprint {args.fingerprint!r} matches {len(matches)} tokens; give more of it")
            if len(current) == 1:
                raise InvalidArgument(f"that is the only token of /mcp/{args.endpoint}; admin.rotate_token first, then revoke")
            fp = tokens.fingerprint(matches[0])
            remaining = [t for t in current if t != matches[0]]
            applied, alive = self._apply(name, remaining)
            tokens.forget(self.store, args.endpoint, fp)
            entry.before = {"fingerprint": fp, "valid_tokens": len(current)}
            entry.after = {"valid_tokens": len(remaining)}
        return RevokeOut(
            endpoint=args.endpoint, fingerprint=fp, valid_tokens=len(remaining), workers_applied=applied, workers=alive
        )

    @tool("admin.list_tokens", title="List tokens", read_only=True)
    def list_tokens(self, args: ListTokensIn, ctx: CallContext) -> ListTokensOut:
        """List each endpoint's valid tokens by fingerprint, with when they were created and last used; never the tokens."""
        chosen = [args.endpoint] if args.endpoint else endpoints(self.store)
        for endpoint in chosen:
            _variable(self.store, endpoint)
        self.token_use.flush(self.store)  # this worker's uses at once, other workers' within a second
        meta = tokens.metadata(self.store)
        listed = []
        for endpoint in chosen:
            for token in ctx.runtime.var(f"mcp-{endpoint}_endpoint_auth"):
                fp = tokens.fingerprint(token)
                row = meta.get((endpoint, fp), {})
                listed.append(
                    TokenInfo(
                        endpoint=endpoint,
                        fingerprint=fp,
                        created_at=row.get("created_at"),
                        last_used_at=row.get("last_used_at"),
                        created_by=row.get("created_by") or "",
                    )
                )
        return ListTokensOut(tokens=listed)
