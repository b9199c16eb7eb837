"""What happens once, in the parent process, before any worker serves.

1. create the data directory (0700) and the admin tables
2. seed the disk layer from the bootstrap file (first start, or --reload-config)
3. disk -> memory for every module (what ProxySQL does at start)
4. environment overrides (MCP_GATEWAY_<VARIABLE>) -> memory, recorded as such (variable_overrides:
   the runtime shows each variable's origin)
5. first start only: generate a token for every endpoint that has none (saved to disk)
6. memory -> runtime for every module, validated; an invalid configuration stops the start
(then `mcp-gateway serve` records --port and --host the same way, as what is served)

With `mcp-cluster_dsn` (from the environment or the local disk layer) the instance joins the
cluster first, under a lock so instances starting together take turns: a module the cluster
already serves is adopted as published (local variables kept); one it does not is loaded from
the disk layers and published. Tokens are generated only for a cluster that has none yet.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway import sqlite, tokens, workers
from gateway.assembly import endpoints, open_store
from gateway.cluster import member_id
from gateway.errors import ConfigError
from gateway.store import ConfigStore


def env_name(variable: str) -> str:
    return "MCP_GATEWAY_" + variable.upper().replace("-", "_").replace(".", "_")


@dataclass
class Prepared:
    store: ConfigStore
    fresh: bool
    generated_tokens: dict[str, str] = field(default_factory=dict)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def seed_disk(store: ConfigStore, bootstrap: Mapping[str, Any]) -> None:
    """Write the bootstrap file's tables into the disk layer (replacing those tables)."""
    known_tables = {t for m in store.modules.values() for t in m.tables}
    conn = store.conn()
    with sqlite.transaction(conn):
        for key, value in bootstrap.items():
            if key == "variables":
                for name, raw in value.items():
                    decl = store.variables.get(name)
                    if decl is None:
                        raise ConfigError(f"bootstrap file: unknown variable {name!r}")
                    decl.parse(_toml_value(raw))
                    conn.execute("INSERT OR REPLACE INTO disk.global_variables VALUES (?, ?)", (name, _toml_value(raw)))
            elif key in known_tables:
                if not isinstance(value, list):
                    raise ConfigError(f"bootstrap file: [[{key}]] must be an array of tables")
                conn.execute(f"DELETE FROM disk.{key}")
                for row in value:
                    cols = list(row)
                    conn.execute(
                        f"INSERT INTO disk.{key} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                        [_toml_value(row[c]) if isinstance(row[c], (bool, list)) else row[c] for c in cols],
                    )
            else:
                raise ConfigError(f"bootstrap file: unknown section {key!r}; known: variables, {', '.join(sorted(known_tables))}")


def prepare(
    data_dir: Path, *, config_file: Path | None = None, reload_config: bool = False, environ: Mapping[str, str] = os.environ
) -> Prepared:
    store = open_store(data_dir)
    store.attach_cluster("", "")  # joined below, from this start's own settings
    fresh = store.initialize()
    workers.forget_all(store)  # rows of a previous run: no worker of this one serves yet
    if config_file is not None and (fresh or reload_config):
        with open(config_file, "rb") as fh:
            seed_disk(store, tomllib.load(fh))
    disk = store.disk_variables()
    settings = {
        **disk,
        **{n: environ[env_name(n)] for n in ("mcp-cluster_dsn", "mcp-cluster_member_name", "mcp-port") if env_name(n) in environ},
    }
    if settings.get("mcp-cluster_dsn"):
        store.attach_cluster(settings["mcp-cluster_dsn"], member_id(settings))
    with store.cluster.join_lock() if store.cluster is not None else contextlib.nullcontext():
        published = store.cluster.versions() if store.cluster is not None else {}
        for module in store.modules:
            store.load_from_disk(module)
        store.clear_overrides()
        store.set_overrides(
            {name: (environ[env_name(name)], "environment") for name in store.variables if env_name(name) in environ}
        )
        generated: dict[str, str] = {}
        if fresh and "MCP VARIABLES" not in published:
            memory = store.memory_variables()
            for endpoint in endpoints():
                name = f"mcp-{endpoint}_endpoint_auth"
                if not memory.get(name):
                    generated[endpoint] = secrets.token_urlsafe(32)
                    store.set_variable(name, generated[endpoint])
                    store.set_variable(name, generated[endpoint], layer="disk")
                    tokens.note_created(store, endpoint, generated[endpoint], created_by="first start")
        for module in store.modules:
            if module not in published:
                store.load_to_runtime(module)  # with a cluster: published, its first version
                if store.cluster is not None and store.cluster.load_disk(module) is None:
                    store.save_to_disk(module)  # the cluster's disk layer starts as this one's
                continue
            if module == "MCP VARIABLES":
                store.load_to_runtime(module, publish=False)  # this instance's local variables
            fetched = store.cluster.fetch(module)
            if fetched is not None:
                store.apply_cluster(fetched, force=True)
    if generated:
        keep_unshown_tokens(data_dir, generated)
    return Prepared(store=store, fresh=fresh, generated_tokens=generated)


UNSHOWN_TOKENS_FILE = "unshown-tokens.json"


def keep_unshown_tokens(data_dir: Path, generated: Mapping[str, str]) -> None:
    """The first start's tokens, kept (0600, in the 0700 data directory) until a start that serves
    has printed them: a first start that fails (a busy port) does not lose them."""
    path = Path(data_dir) / UNSHOWN_TOKENS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(dict(generated), handle)


def unshown_tokens(data_dir: Path, store: ConfigStore) -> dict[str, str]:
    """The first start's tokens no start has shown yet, those still accepted (a token rotated
    away since is not shown)."""
    path = Path(data_dir) / UNSHOWN_TOKENS_FILE
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    runtime = store.read_runtime()
    shown = {}
    for endpoint, token in kept.items():
        try:
            accepted = runtime.var(f"mcp-{endpoint}_endpoint_auth") or ()
        except KeyError:
            continue
        if token in accepted:
            shown[endpoint] = token
    return shown


def tokens_shown(data_dir: Path) -> None:
    (Path(data_dir) / UNSHOWN_TOKENS_FILE).unlink(missing_ok=True)
