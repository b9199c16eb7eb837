"""Host and Origin checks against DNS rebinding, for every request on every path.

The attack: a web page at evil.example, whose DNS name then resolves to 127.0.0.1, makes the
user's browser send requests to a gateway bound to loopback. Such a request carries the page's
name in `Host` and its site in `Origin`; a real local client carries a loopback name, or no
Origin at all. So (as the MCP transport specification and the official SDKs require):

- bound to a loopback address, `Host` must name loopback (`localhost`, `127.0.0.1`, `[::1]`,
  any port) or a name listed in mcp-allowed_hosts; otherwise 421 Misdirected Request;
- bound to any other address, mcp-allowed_hosts empty accepts any Host (the operator's proxy or
  network decides who reaches it); a non-empty list is enforced as above;
- a present `Origin` must be a loopback origin (http or https, any port) or listed in
  mcp-allowed_origins; otherwise 403. Non-browser clients send no Origin and are not affected.

`*` in either list accepts anything. Names compare case-insensitively; a listed host matches
with any port; a listed origin must match scheme, host and port exactly.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple
from urllib.parse import urlsplit

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
LOOPBACK_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


class Refusal(NamedTuple):
    reason: str  # "host" | "origin": the metric label
    status: int  # 421 | 403
    message: str


def is_loopback_address(address: str) -> bool:
    """True for a bind address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    address = address.strip().strip("[]").lower()
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def host_name(value: str) -> str | None:
    """The name of a `Host` header value (`name`, `name:port`, `[v6]`, `[v6]:port`), lowercased;
    None when it is malformed (a port that is no number, text after an IPv6 literal, userinfo)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return name if name else None
    name, sep, port = value.partition(":")
    if sep and not port.isdigit():
        return None
    if not name or "@" in name or "/" in name:
        return None
    return name


def origin_key(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an Origin value, lowercased; None when it is not an http(s) origin."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in LOOPBACK_SCHEMES or not parts.hostname or parts.username or parts.path not in ("", "/"):
        return None
    scheme = parts.scheme.lower()
    return scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme]


class HostGuard:
    """The checks for one runtime (the allowed lists) and one listener (its bind address)."""

    def __init__(self, bind_address: str, allowed_hosts: tuple[str, ...], allowed_origins: tuple[str, ...]) -> None:
        hosts = {h.strip().lower().strip("[]") for h in allowed_hosts if h.strip()}
        self.any_host = "*" in hosts or (not hosts and not is_loopback_address(bind_address))
        self.hosts = frozenset(hosts | LOOPBACK_HOSTS)
        self.any_origin = "*" in allowed_origins
        self.origins = frozenset(key for key in map(origin_key, allowed_origins) if key is not None)
        self._seen_hosts: set[bytes] = set()  # Host values already accepted: the common case is one dict hit

    def refusal(self, host: bytes | None, origin: bytes | None) -> Refusal | None:
        """Why a request with these headers is refused, or None to serve it."""
        if host is not None and not self.any_host and host not in self._seen_hosts:
            text = host.decode("latin-1")
            if host_name(text) not in self.hosts:
                return Refusal(
                    "host",
                    421,
                    f"Host {text[:100]!r} is not allowed (DNS rebinding protection): use localhost, 127.0.0.1 or [::1], "
                    "or list the name in mcp-allowed_hosts",
                )
            if len(self._seen_hosts) < 64:  # bounded: a client cycling ports cannot grow it
                self._seen_hosts.add(host)
        if origin is not None and not self.any_origin:
            text = origin.decode("latin-1")
            key = origin_key(text)
            if key is None or (key[1] not in LOOPBACK_HOSTS and key not in self.origins):
                return Refusal(
                    "origin",
                    403,
                    f"Origin {text[:100]!r} is not allowed: only loopback origins and those listed in mcp-allowed_origins may call",
                )
        return None
