"""The quick-start corpus: Python's own documentation, as a SQLite source synced on first start.

Every Python installation carries the language reference (`pydoc_data.topics`, what `help()`
shows for keywords and topics) and the standard library's docstrings. `build_corpus` writes
them into <data_dir>/demo_corpus.db, table python_docs(id, kind, title, body, updated_at);
`ensure_demo` registers a sqlite target and a rag source over it (memory, runtime and disk
layers, like an admin would); `start_demo_in_background` then syncs it through the same job
as `mcp-gateway rag sync`, with a progress bar on the terminal. So rag.search_hybrid answers
questions about Python right after the first start, with nothing downloaded.

The corpus is capped (MAX_DOCS) so the local model embeds it in a couple of minutes on two
cores; chunks are smaller than the blueprint's 4000 characters because the local model reads
only its first 256 tokens (~1000 characters) of each chunk.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw

from backends.retrieval import storage
from backends.retrieval.ingest.foreground import run_sync
from gateway import sqlite
from gateway.store import ConfigStore

log = logging.getLogger("mcp_gateway.rag.demo")

SOURCE_NAME = "python_docs"
TARGET_ID = "demo_corpus"
CORPUS_FILE = "demo_corpus.db"
MAX_DOCS = 2500
# The embedding budget. 600k characters make ~930 chunks of ~145 tokens; the local model is all
# of the cost (measured: 254 s on a shared 2-core machine at load average 8, so roughly a third
# of that on idle cores). What the cap leaves out is the least asked-about part (methods and
# classes of library modules), by the order of KIND_PRIORITY.
MAX_CORPUS_CHARS = 600_000
MIN_DOC_CHARS = 80
KIND_PRIORITY = {"language reference": 0, "builtin": 1, "module": 2, "function": 3, "class": 4, "method": 5}
# Modules whose import has no side effects and whose docstrings answer everyday questions.
_MODULE_NAMES = """
abc argparse array asyncio base64 bisect builtins calendar collections collections.abc
concurrent.futures contextlib copy csv dataclasses datetime decimal difflib enum fnmatch fractions
functools glob gzip hashlib heapq hmac html http.client http.server inspect io ipaddress itertools
json logging math operator os os.path pathlib pickle platform pprint queue random re secrets shlex
shutil signal socket sqlite3 ssl statistics string struct subprocess sys tempfile textwrap
threading time timeit traceback types typing unittest urllib.parse urllib.request uuid warnings
weakref zipfile zlib
"""
MODULES = tuple(_MODULE_NAMES.split())
DEMO_DOC_MAP = {
    "doc_id": {"format": "pydoc:{id}"},
    "title": {"concat": [{"col": "title"}]},
    "body": {"concat": [{"col": "body"}]},
    "metadata": {"pick": ["kind"]},
}
DEMO_CHUNKING = {"unit": "chars", "chunk_size": 1000, "overlap": 100, "min_chunk_size": 200}


# -- the corpus ------------------------------------------------------------------------------
def _topics() -> Iterator[tuple[str, str, str]]:
    from pydoc_data.topics import topics

    for name, text in sorted(topics.items()):
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        heading = lines[0] if lines else name
        yield "language reference", f"{heading} ({name})", text.strip()


def _docstrings() -> Iterator[tuple[str, str, str]]:
    for module_name in MODULES:
        try:
            module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 - a module missing from this build is simply left out
            continue
        doc = inspect.getdoc(module)
        if doc:
            yield "module", f"module {module_name}", doc
        for attr_name, value in sorted(vars(module).items()):
            if attr_name.startswith("_") or getattr(value, "__module__", None) not in (module_name, module.__name__):
                continue
            if not (inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.isclass(value)):
                continue
            yield from _member_docs(module_name, attr_name, value)


def _member_docs(module_name: str, attr_name: str, value: Any) -> Iterator[tuple[str, str, str]]:
    qualified = f"{module_name}.{attr_name}"
    doc = inspect.getdoc(value)
    builtin = module_name == "builtins"  # list.sort, dict.get, sorted, ...: asked about most
    if doc:
        yield (
            ("builtin" if builtin else "class" if inspect.isclass(value) else "function"),
            f"{qualified}{_signature(value)}",
            doc,
        )
    if inspect.isclass(value):
        for method_name, method in sorted(vars(value).items()):
            if method_name.startswith("_") or not callable(method):
                continue
            method_doc = inspect.getdoc(method)
            if method_doc:
                yield ("builtin" if builtin else "method"), f"{qualified}.{method_name}{_signature(method)}", method_doc


def _signature(value: Any) -> str:
    try:
        return str(inspect.signature(value))
    except (TypeError, ValueError):
        return ""


def build_corpus(path: Path, *, max_docs: int = MAX_DOCS, max_chars: int = MAX_CORPUS_CHARS) -> int:
    """Write the corpus file (replacing any earlier one); returns the number of documents."""
    rows, seen_bodies, total_chars = [], set(), 0
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated aliases (typing.io, ...) warn when inspected
        documents = sorted([*_topics(), *_docstrings()], key=lambda doc: KIND_PRIORITY[doc[0]])  # stable
    for kind, title, body in documents:
        if len(body) < MIN_DOC_CHARS or body in seen_bodies:
            continue  # one-liners retrieve badly; inherited docstrings repeat
        if len(rows) >= max_docs or total_chars + len(body) > max_chars:
            continue  # smaller documents further down may still fit
        seen_bodies.add(body)
        total_chars += len(body)
        rows.append((len(rows) + 1, kind, title, body, stamp))
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    conn = apsw.Connection(str(tmp))  # a plain SQLite file (rollback journal): any reader opens it
    try:
        with conn:  # one transaction
            conn.execute(
                "CREATE TABLE python_docs (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, updated_at TEXT NOT NULL)"
            )
            conn.executemany("INSERT INTO python_docs VALUES (?, ?, ?, ?, ?)", rows)
    finally:
        conn.close()
    tmp.replace(path)  # atomic: a reader never sees half a corpus
    return len(rows)


# -- registration ----------------------------------------------------------------------------
def ensure_demo(data_dir: Path, store: ConfigStore) -> bool:
    """Build the corpus and register its target and source if they are missing (all three
    layers). Returns True when something was created. Safe to call on every start."""
    path = Path(data_dir) / CORPUS_FILE
    created = False
    if not path.exists():
        count = build_corpus(path)
        log.info("demo corpus: %d documents of Python documentation in %s", count, path)
        created = True
    conn = store.conn()
    with sqlite.transaction(conn):
        has_target = sqlite.scalar(conn, "SELECT count(*) FROM main.mcp_target_profiles WHERE target_id = ?", (TARGET_ID,))
        has_source = sqlite.scalar(conn, "SELECT count(*) FROM main.rag_sources WHERE name = ?", (SOURCE_NAME,))
        if not has_target:
            conn.execute(
                "INSERT INTO main.mcp_target_profiles (target_id, protocol, database, description) VALUES (?, 'sqlite', ?, ?)",
                (TARGET_ID, str(path), "Quick-start corpus: Python's language reference and standard-library docstrings"),
            )
        if not has_source:
            source_id = int(sqlite.scalar(conn, "SELECT coalesce(max(source_id), 0) + 1 FROM main.rag_sources"))
            conn.execute(
                "INSERT INTO main.rag_sources (source_id, name, target_id, table_name, pk_column, watermark_column, doc_map_json,"
                " chunking_json, comment) VALUES (?, ?, ?, 'python_docs', 'id', 'updated_at', ?, ?, ?)",
                (
                    source_id,
                    SOURCE_NAME,
                    TARGET_ID,
                    json.dumps(DEMO_DOC_MAP),
                    json.dumps(DEMO_CHUNKING),
                    "quick-start demo corpus",
                ),
            )
    if not (has_target and has_source):
        for module in ("MCP PROFILES", "RAG SOURCES"):
            store.load_to_runtime(module)
            store.save_to_disk(module)
        created = True
    return created


def demo_needs_sync(data_dir: Path) -> bool:
    """True until one sync of the demo source has finished (so a killed first sync resumes)."""
    rag_db = Path(data_dir) / "rag.db"
    if not rag_db.exists():
        return True
    conn = sqlite.connect(rag_db, readonly=True)
    try:
        done = sqlite.scalar(
            conn,
            "SELECT count(*) FROM rag_sync_state st JOIN rag_sources s ON s.source_id = st.source_id WHERE s.name = ? AND st.last_ok_at IS NOT NULL",
            (SOURCE_NAME,),
        )
    except Exception:  # noqa: BLE001 - an index without the tables yet has not synced anything
        return True
    finally:
        conn.close()
    return not done


def start_demo_in_background(
    data_dir: Path, *, store: ConfigStore, first_start: bool, progress: bool = True
) -> threading.Thread | None:
    """First start: build and register the demo, then sync it in a background thread (progress
    bar on stderr) while the server starts. Later starts resume a sync that never finished."""
    data_dir = Path(data_dir)
    if store.cluster is not None or storage.shares_index(store.read_runtime()):
        # The demo is one machine's quick start: its corpus is a file in this data directory,
        # which a cluster's other instances (and a shared index) cannot read.
        log.info("no demo corpus: this gateway shares its configuration or its RAG index")
        return None
    if first_start:
        try:
            ensure_demo(data_dir, store)
        except Exception:  # the demo is a convenience: never stop the server from starting
            log.exception("could not set up the demo corpus")
            return None
    elif not (data_dir / CORPUS_FILE).exists() or not demo_needs_sync(data_dir):
        return None
    if not demo_needs_sync(data_dir):
        return None

    def sync() -> None:
        try:
            code = run_sync(store, SOURCE_NAME, progress=progress, out=_Discard())
            if code != 0:
                log.warning(
                    "demo corpus sync did not finish (exit %d); `mcp-gateway rag sync --source %s` retries", code, SOURCE_NAME
                )
        except Exception:  # a failed demo must not take the server down
            log.exception("demo corpus sync failed")

    thread = threading.Thread(target=sync, name="rag-demo-sync", daemon=True)
    thread.start()
    return thread


class _Discard:
    def write(self, _text: str) -> int:
        return 0

    def flush(self) -> None:
        pass
