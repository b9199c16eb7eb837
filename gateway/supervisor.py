"""The parent process of `serve --workers N > 1`: a lean supervisor that holds none of the app.

`mcp-gateway serve` starts as one full process: it opens the config store (every handler's
variables, the custom tools' SQL checks: the whole app, ~100 MiB of imports), prints the banner,
binds the socket and runs the handlers' `before_serve`. With several workers that process would
then stay resident only to supervise, so it replaces itself (exec, same pid) with this module's
`main`, which holds what supervising needs and nothing else (issue 30):

    setup (full app)     prepare, banner, bind, before_serve -> [SupervisorJob]  --exec-->
    supervisor (lean)    the listening socket, uvicorn's Multiprocess and its fork server, the
                         handlers' jobs (the embedding model served to the workers, the demo
                         sync in a child), SIGHUP (reloaded by a child that opens the store)

A handler's job is named by import path ("module:function" and JSON arguments) so the supervisor
imports that module only. With mcp-metrics_port the supervisor serves the app's scrape
collectors, so it stays the full process (cli.py) and runs the jobs in it.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("mcp_gateway")

SPEC_ENV = "MCP_GATEWAY_SUPERVISOR_SPEC"  # the setup's hand-over; popped as the supervisor starts
EXIT_GRACE_S = 3.5
# glibc gives each thread that allocates an arena of its own (up to 8 per core) and keeps what was
# freed in each: a worker's threads (event loop, tool threads, pools) held ~13 MiB more RSS per
# worker with the default than with 2 (issue 30, bench/rss_per_worker.py). An operator's own
# MALLOC_ARENA_MAX is kept.
WORKER_MALLOC_ARENAS = "2"
# What the fork server imports once before it forks each worker (gateway/worker_preload.py).
WORKER_PRELOAD = ("gateway.worker_preload",)


@dataclass(frozen=True)
class SupervisorJob:
    """Work a handler runs in the supervisor beside the workers: `function` ("module:function")
    is called with `kwargs` (JSON values) before the workers start."""

    function: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def run(self) -> None:
        module, _, name = self.function.partition(":")
        getattr(importlib.import_module(module), name)(**self.kwargs)


def python_command(code: str) -> list[str]:
    """A command running `code` in a fresh interpreter with this one's flags and import path
    (the way multiprocessing's fork server is started), whatever the working directory."""
    bootstrap = f"import sys; sys.path[:] = {sys.path!r}\n{code}"
    return [sys.executable, *subprocess._args_from_interpreter_flags(), "-c", bootstrap]  # type: ignore[attr-defined]


def become_supervisor(spec: dict[str, Any], *, listening: Any, jobs: list[SupervisorJob]) -> None:
    """Replace this process (same pid, same stdout/stderr, the listening socket kept open) by
    the lean supervisor. `spec`: what `main` needs to serve (see there). Does not return."""
    os.set_inheritable(listening.fileno(), True)
    handover = {**spec, "socket_fd": listening.fileno(), "jobs": [[job.function, job.kwargs] for job in jobs]}
    os.environ[SPEC_ENV] = json.dumps(handover)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    # The command line's own arguments follow, unread: `ps` still shows what was started.
    command = python_command("from gateway.supervisor import main; main()") + sys.argv[1:]
    os.execv(command[0], command)


def main() -> None:
    import socket

    from gateway import tls
    from gateway.logs import setup_logging
    from gateway.metrics import worker_restarts_counter

    spec = json.loads(os.environ.pop(SPEC_ENV))
    setup_logging(spec["log_level"])
    listening = socket.socket(fileno=spec["socket_fd"])
    os.set_inheritable(listening.fileno(), False)
    config = tls.ReloadableTLSConfig("gateway.app:create_app", factory=True, **spec["uvicorn"])
    state_files = [Path(path) for path in spec["state_files"]]
    # uvicorn re-raises the SIGTERM it handled once it has shut down; the default action would end
    # the process before the `finally` below removes the state and run files. Exit normally instead.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    certificate = {"served": spec["certificate"]}

    def reload() -> None:  # SIGHUP: gateway/reload.py, in a child that opens the store
        code = "from gateway.reload import reload_child; reload_child()"
        argv = [spec["data_dir"], certificate["served"], spec["log_level"]]
        try:
            done = subprocess.run(
                python_command(code) + argv, env=spec["environ"], stdout=subprocess.PIPE, text=True, timeout=120
            )
            if done.returncode == 0:
                certificate["served"] = json.loads(done.stdout)["certificate_now"]
            else:
                log.error("SIGHUP: reloading from disk failed (exit %d); the runtime is unchanged", done.returncode)
        except Exception:  # a reload must never take the gateway down
            log.exception("SIGHUP: reloading from disk failed; the runtime is unchanged")

    code = 0
    try:
        try:
            for function, kwargs in spec["jobs"]:
                SupervisorJob(function, kwargs).run()
            # Read by glibc as each worker starts (this process's heap is set up already).
            os.environ.setdefault("MALLOC_ARENA_MAX", WORKER_MALLOC_ARENAS)
            supervisor(config, [listening], on_hup=reload, restarts=worker_restarts_counter()).run()
        finally:
            for path in state_files:
                path.unlink(missing_ok=True)
            exit_within(EXIT_GRACE_S)
    except SystemExit as exc:  # SIGTERM (above)
        code = exc.code if isinstance(exc.code, int) else 1
    # A service thread may be inside the model, embedding a batch of the demo sync: finalizing
    # the interpreter would destroy the session under it (onnxruntime aborts the process). This
    # process has nothing else to finalize: run the exit hooks (the embedding service closes, the
    # demo sync's child is stopped) and leave.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def exit_within(seconds: float) -> None:
    """Exit 0 at most `seconds` after serving stopped. Background work the handlers started in
    this process (the demo corpus sync) stops at its next batch through its exit hooks; a
    thread still inside one long call (a model embedding a batch) is not waited for: what it
    committed stays, and the next start resumes after it."""

    def force() -> None:
        log.warning("background work still running %.1f s after the server stopped: exiting without it", seconds)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)

    timer = threading.Timer(seconds, force)
    timer.daemon = True
    timer.start()


def supervisor(config: Any, sockets: list[Any], *, on_hup: Any, restarts: Any) -> Any:
    """uvicorn's worker supervisor, with two changes: SIGHUP reloads from disk instead of
    restarting every worker (a restart would drop the in-memory ANN index and cached pools),
    and each worker it replaces is counted in mcp_gateway_worker_restarts_total."""
    from uvicorn.supervisors import Multiprocess

    fork_workers_from_server(WORKER_PRELOAD)

    class _Supervisor(Multiprocess):
        def handle_hup(self) -> None:
            log.info("Received SIGHUP: reloading certificates and every module from disk")
            on_hup()

        def keep_subprocess_alive(self) -> None:
            before = list(self.processes)
            super().keep_subprocess_alive()
            replaced = sum(1 for old, new in zip(before, self.processes) if old is not new)
            if replaced:
                restarts.inc(replaced)

    return _Supervisor(config, sockets)


def fork_workers_from_server(preload: tuple[str, ...]) -> None:
    """Start uvicorn's workers from a multiprocessing fork server instead of "spawn".

    Spawned, each worker is a fresh interpreter that imports everything again (~100 MiB of
    modules per worker). The fork server is one process, started when the first worker is (after
    every environment variable the workers need is set), that imports `preload` once and forks
    each worker, the first ones and every replacement alike: the imported pages are shared
    copy-on-write between the workers. Summed RSS counts shared pages in every process, so it
    does not fall (and the fork server adds a process); PSS, what the machine really holds, does
    (issue 30). The supervisor itself (threads: the embedding service, the demo build) is never
    forked. uvicorn offers no hook for the start method: its module-level `get_subprocess`, which
    it calls for each worker, is replaced with one that uses the fork server's context."""
    import multiprocessing

    from uvicorn import _subprocess
    from uvicorn.supervisors import multiprocess

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))

    def get_subprocess(config: Any, target: Any, sockets: list[Any]) -> Any:  # as uvicorn's, another context
        try:
            stdin_fileno: int | None = sys.stdin.fileno()
        except (AttributeError, OSError):
            stdin_fileno = None
        kwargs = {"config": config, "target": target, "sockets": sockets, "stdin_fileno": stdin_fileno}
        return context.Process(target=_subprocess.subprocess_started, kwargs=kwargs)

    multiprocess.get_subprocess = get_subprocess
