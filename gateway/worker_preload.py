"""What the fork server that starts the workers imports once, before it forks each of them
(gateway/cli.py, `_fork_workers_from_server`; only with --workers > 1).

Everything a worker imports to build the app and serve (gateway.app, every handler, the backends
they import, uvicorn's loop and protocols) is imported here, in the fork server, so the workers
share those pages copy-on-write instead of each importing its own copy. `gc.freeze()` then moves
every object created so far out of the collector's generations: a collection in a worker would
otherwise write to the header of each of them and copy the page. The fork server starts no
Python thread, so forking it is safe (numpy's OpenBLAS starts a thread pool of its own, and
stops and restarts it around a fork: pthread_atfork). Importing this module anywhere else only
costs the imports.
"""

from __future__ import annotations

import contextlib
import gc
import importlib

import gateway.app  # noqa: F401  (the ASGI app's modules)
from gateway.assembly import config_modules, declared_variables

# What uvicorn imports in each worker as it starts serving (its "auto" choices, as installed).
UVICORN_MODULES = (
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.loops.uvloop",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
    "anyio._backends._asyncio",
)

declared_variables()  # every handler package, with the backends and libraries it imports
config_modules()  # the config store's modules (custom tools, declarations)
for name in UVICORN_MODULES:
    with contextlib.suppress(ImportError):  # an optional speed-up (uvloop, httptools) not installed
        importlib.import_module(name)
gc.freeze()
