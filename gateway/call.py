"""`CallContext`: what a tool function, and the backends it calls, may know about the call it serves.

Its own module so that backends/ (the read-only SQL path takes a context) depends on it
without depending on the tool machinery (gateway.tools), which depends on the services.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.errors import DeadlineExceeded

if TYPE_CHECKING:
    from gateway.runtime import Runtime


@dataclass(frozen=True)
class Caller:
    """Who is asking: how the caller was admitted and, for an OAuth access token, who it names.

    `admitted` is "static" (an endpoint's bearer token: no subject) or "oauth" (a validated JWT:
    `subject` is its subject claim, `claims` the claims an admin chose to carry (mcp-oauth_claims),
    as text, `scopes` what it grants). The token itself is never kept, only its fingerprint."""

    token_fingerprint: str = ""
    subject: str = ""
    claims: Mapping[str, str] = field(default_factory=dict)
    scopes: frozenset[str] = frozenset()
    admitted: str = "static"

    @property
    def evidence_key(self) -> str:
        """Who the traffic evidence (/mcp/ai's anomalies) counts a call under: `sub:<subject>` for
        an OAuth caller (one user, whichever token), "" for a static token (its fingerprint)."""
        return f"sub:{self.subject}" if self.subject else ""

    def matches(self, wanted: str) -> bool:
        """`alice`: the subject is alice; `groups=analysts`: a carried claim is analysts, or a list
        claim holds it. A static-token caller (no subject) matches nothing. Used by query rules'
        `caller` column and mcp_identity_profiles."""
        if self.admitted != "oauth":
            return False
        claim, sep, value = wanted.partition("=")
        if not sep:
            return self.subject == wanted
        have, value = self.claim(claim.strip()), value.strip()
        return have == value or value in have.split(",")

    def claim(self, name: str) -> str:
        """A carried claim's value ("sub" is the subject), "" when absent."""
        if name == "sub":
            return self.subject
        return self.claims.get(name, "")


ANONYMOUS = Caller()


@dataclass(frozen=True)
class CallContext:
    """What a tool function may know about the call it serves."""

    endpoint: str
    tool_name: str
    runtime: Runtime
    deadline: float  # time.monotonic() value after which the call is abandoned
    protocol_version: str = ""
    client: str = ""  # the caller's address
    token_fingerprint: str = ""  # of the token the caller was admitted with (gateway.tokens)
    caller: Caller = ANONYMOUS  # who is asking (an OAuth subject and claims, or a static token)

    @property
    def subject(self) -> str:
        return self.caller.subject

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def check_deadline(self) -> None:
        """Long loops call this between steps so a thread does not outlive its caller by much."""
        if time.monotonic() > self.deadline:
            raise DeadlineExceeded(f"{self.tool_name} ran past its deadline")
