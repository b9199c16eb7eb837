"""Where the commands other than `serve` find a gateway's data directory; they never create one.

`mcp-gateway serve` writes a run file, `<run dir>/<pid>.json` = {pid, data_dir, port, host,
use_ssl}, and removes it when it stops. The run dir is `$XDG_RUNTIME_DIR/mcp-gateway`, or
`<tmp>/mcp-gateway-<uid>` where that variable is unset (both private to the user).

`locate_data_dir(given)`: `--data-dir` when given (it must hold a gateway's config.db), else
`./mcp-gateway-data` when it exists, else the data directory of the one running gateway the run
files name. Anything else is an error that says exactly which `--data-dir` to pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from gateway.errors import ConfigError
from gateway.pids import pid_alive

DEFAULT_DATA_DIR = "mcp-gateway-data"


class NoDataDir(ConfigError):
    """No gateway data directory where the command looked; the message says what to pass."""


def run_dir() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "mcp-gateway"
    return Path(tempfile.gettempdir()) / f"mcp-gateway-{os.getuid()}"


def write_run_file(*, data_dir: Path, port: int, host: str, use_ssl: bool) -> Path:
    directory = run_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / f"{os.getpid()}.json"
    state = {"pid": os.getpid(), "data_dir": str(data_dir), "port": port, "host": host, "use_ssl": use_ssl}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(state, handle)
    return path


def running_gateways() -> list[dict[str, Any]]:
    """The gateways whose run files name a live process (stale files are removed)."""
    found = []
    for path in sorted(run_dir().glob("*.json")):
        try:
            state = json.loads(path.read_text())
            alive = pid_alive(int(state["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if alive:
            found.append(state)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return found


def is_data_dir(path: Path) -> bool:
    return (path / "config.db").is_file()


def locate_data_dir(given: str | os.PathLike[str] | None) -> Path:
    """The data directory a command other than `serve` works on; raises NoDataDir, creating nothing."""
    if given is not None:
        path = Path(given).resolve()
        if not is_data_dir(path):
            raise NoDataDir(
                f"no gateway data directory at {path} (no config.db there); pass the --data-dir that `mcp-gateway serve` used"
            )
        return path
    default = Path(DEFAULT_DATA_DIR).resolve()
    if is_data_dir(default):
        return default
    running = running_gateways()
    if len(running) == 1:
        return Path(running[0]["data_dir"])
    if running:
        choices = "; ".join(f"--data-dir {g['data_dir']} (pid {g['pid']}, port {g['port']})" for g in running)
        raise NoDataDir(f"{len(running)} gateways are running; say which with one of: {choices}")
    raise NoDataDir(
        f"no gateway data directory at {default} and no running gateway found (run files in {run_dir()}); "
        "pass --data-dir DIR, the directory `mcp-gateway serve --data-dir DIR` uses"
    )
