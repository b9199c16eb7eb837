"""What the fork server that starts the workers imports once, before it forks each of them
(gateway/cli.py, `_fork_workers_from_server`; only with --workers > 1).

Everything a worker imports to build the app (gateway.app, every handler, the backends they
import at the top) is imported here, in the fork server, so the workers share those pages
copy-on-write instead of each importing its own copy. `gc.freeze()` then moves every object
created so far out of the collector's generations: a collection in a worker would otherwise write
to the header of each of them and copy the page. The fork server starts no thread: forking it is
safe. Importing this module anywhere else only costs the imports.
"""

from __future__ import annotations

import gc

import gateway.app  # noqa: F401  (the ASGI app's modules)
from gateway.assembly import handler_classes

handler_classes()  # every handler package, with the backends and libraries it imports
gc.freeze()
