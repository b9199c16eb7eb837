"""The gateway's log: one format, on stderr, for every process of an instance (the command line,
the lean supervisor, the children it starts)."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request at INFO: noise on a command's stderr and in the gateway's log
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
