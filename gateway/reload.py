"""SIGHUP (`systemctl reload mcp-gateway`): re-read the disk layer and the certificate files.

The process that received the signal (the parent of the workers, or the only process with
`--workers 1`) does what a start does, without restarting anything:

1. LOAD every module FROM DISK, then apply the environment overrides again (MCP_GATEWAY_<NAME>:
   tokens given that way must survive a reload), then LOAD every module TO RUNTIME. A module whose
   disk rows do not validate keeps serving its current runtime; the error is logged.
2. Bump the runtime version even when nothing changed: every worker follows that version
   (gateway/app.py) and re-reads the certificate files on each change, within a second.
3. Log what changed: variables by name (secret values masked), rows added, removed or changed per
   runtime table, and the certificate (subject, serial, not-after) when its files changed.

Edits in the memory layer that were never saved are replaced by the disk layer, as
`LOAD ... FROM DISK` does in ProxySQL.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway import tls
from gateway.errors import ConfigError
from gateway.runtime import Runtime
from gateway.store import ConfigStore

log = logging.getLogger("mcp_gateway.reload")


@dataclass
class ReloadReport:
    variables: list[str] = field(default_factory=list)  # "name: old -> new", secrets masked
    tables: dict[str, str] = field(default_factory=dict)  # runtime table -> "+a -b ~c"
    failed: dict[str, str] = field(default_factory=dict)  # module -> why it kept its runtime
    certificate: str = ""  # "" when the certificate files did not change
    certificate_now: str = ""  # subject, serial, not-after of the certificate now served
    version: int = 0

    def summary(self) -> str:
        parts = []
        if self.variables:
            parts.append("variables: " + "; ".join(self.variables))
        parts += [f"{table}: {change}" for table, change in self.tables.items()]
        if self.certificate:
            parts.append(f"certificate: {self.certificate}")
        parts += [f"{module} NOT loaded ({why})" for module, why in self.failed.items()]
        return ", ".join(parts) or "nothing changed"


def reload_from_disk(
    store: ConfigStore, environ: Mapping[str, str] = os.environ, *, certificate_before: str | None = None
) -> ReloadReport:
    """Steps 1-3 above; returns what changed (also logged). `certificate_before` is what the
    previous start or reload served (`certificate_identity`): the files may already be new."""
    from gateway.startup import env_name  # startup imports the handlers: import on use

    before = store.read_runtime()
    cert_before = certificate_identity(store.data_dir, before) if certificate_before is None else certificate_before
    report = ReloadReport()
    for module in store.modules:
        store.load_from_disk(module)
    for name in store.variables:
        if env_name(name) in environ:
            store.set_variable(name, environ[env_name(name)])
    for module in store.modules:
        try:
            store.load_to_runtime(module)
        except ConfigError as exc:
            report.failed[module] = exc.message
            log.error("SIGHUP: %s keeps its runtime: %s", module, exc.message)
    report.version = store.touch_runtime()
    after = store.read_runtime()
    report.variables = _variable_changes(before, after)
    report.tables = _table_changes(before, after)
    cert_after = report.certificate_now = certificate_identity(store.data_dir, after)
    if cert_after != cert_before:
        report.certificate = f"{cert_before or 'none'} -> {cert_after or 'none'}"
    log.info("SIGHUP: reloaded from disk (runtime version %s): %s", report.version, report.summary())
    return report


def _variable_changes(before: Runtime, after: Runtime) -> list[str]:
    changes = []
    for name, decl in after.declarations.items():
        old, new = before.variables.get(name), after.variables.get(name)
        if old != new:
            changes.append(f"{name}: {decl.display(_text(old))} -> {decl.display(_text(new))}")
    return changes


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def _table_changes(before: Runtime, after: Runtime) -> dict[str, str]:
    """Rows compared whole (first column as the key): "+added -removed ~changed" per table."""
    changes = {}
    for table in sorted(set(before.tables) | set(after.tables)):
        old = _keyed(before.table(table))
        new = _keyed(after.table(table))
        added = len(new.keys() - old.keys())
        removed = len(old.keys() - new.keys())
        changed = sum(1 for key in new.keys() & old.keys() if new[key] != old[key])
        if added or removed or changed:
            changes[table] = f"+{added} -{removed} ~{changed}"
    return changes


def _keyed(rows: tuple[dict[str, Any], ...]) -> dict[str, str]:
    keyed = {}
    for row in rows:
        values = list(row.values())
        keyed[json.dumps(values[:1], default=str)] = json.dumps(values, default=str)
    return keyed


def certificate_identity(data_dir: Path, runtime: Runtime) -> str:
    """Subject, serial and not-after of the certificate the runtime names ("" without TLS)."""
    if not runtime.var("mcp-use_ssl"):
        return ""
    try:
        cert_path, _ = tls.resolve_material(data_dir, runtime.var("mcp-ssl_cert"), runtime.var("mcp-ssl_key"))
        return tls.describe_certificate(cert_path)
    except (OSError, ValueError) as exc:
        return f"unreadable ({exc})"


def reload_child() -> None:
    """SIGHUP in the lean supervisor of several workers (gateway/supervisor.py), which holds no
    config store: steps 1-3 in this child process (argv: data directory, the certificate served
    before, log level), which prints what it serves now as JSON. Its environment is the one the
    gateway started with, so MCP_GATEWAY_<NAME> overrides apply again."""
    import sys

    from gateway.assembly import open_store  # the whole app's variables and modules: in this child only
    from gateway.logs import setup_logging

    data_dir, certificate_before, log_level = sys.argv[1:4]
    setup_logging(log_level)
    report = reload_from_disk(open_store(Path(data_dir)), os.environ, certificate_before=certificate_before)
    print(json.dumps({"certificate_now": report.certificate_now}))
