"""The quick-start corpus: Python's own documentation, as a SQLite source synced on first start.

Every Python installation carries the language reference (`pydoc_data.topics`, what `help()`
shows for keywords and topics) and the standard library's docstrings. `build_corpus` writes
them into <data_dir>/demo_corpus.db, table python_docs(id, kind, title, body, updated_at);
`ensure_demo` registers a sqlite target and a rag source over it (memory, runtime and disk
layers, like an admin would); `start_demo_in_background` then syncs it through the same job
as `mcp-gateway rag sync`, with a progress bar on the terminal. So rag.search_hybrid answers
questions about Python right after the first start, with nothing downloaded.

What it covers: every public module of the standard library (sys.stdlib_module_names, less
SKIP), each as an overview (its docstring and one line per function and class) and one document
per function, class and method; a function re-exported elsewhere is documented once, under the
name users know (`builtins.open`, not `io.open`; `os.listdir`, not `posix.listdir`). About 2,700
documents, 3,500 chunks. Rows sync in id order, and ids put the everyday modules (EVERYDAY) and
builtins first, then the language reference, then the rest: the first searches land within
seconds of the start while the rest embeds (minutes on two cores; bench/worker_memory.py).
Chunks are smaller than the blueprint's 4000 characters because the local model reads only the
first 256 tokens (~1000 characters) of each chunk.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import logging
import os
import subprocess
import sys
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
MAX_DOCS = 12_000
# The embedding budget: the local model is all of the build's cost, in proportion to the text.
# 1.6M characters make about 2,400 chunks. Rows are synced in id order and ids follow
# KIND_PRIORITY within each tier (EVERYDAY modules and builtins, then the language reference,
# then the rest of the standard library), so the first searches land within seconds of the start
# while the rest is still embedding (bench/worker_memory.py: first_hit_s).
MAX_CORPUS_CHARS = 1_600_000
MIN_DOC_CHARS = 80
MAX_SUMMARY_CHARS = 4000  # a module's overview: its docstring and one line per member
KIND_PRIORITY = {"module": 0, "builtin": 1, "function": 2, "class": 3, "method": 4, "language reference": 5}
# What a Python user asks about first: documented first (tier 0), whole.
_EVERYDAY = """
builtins os os.path io pathlib sys shutil glob tempfile subprocess threading concurrent.futures
multiprocessing asyncio queue time datetime calendar zoneinfo json csv sqlite3 pickle re string
textwrap difflib collections collections.abc itertools functools operator heapq bisect copy
dataclasses enum typing math random statistics decimal fractions secrets hashlib hmac base64
uuid logging logging.handlers argparse unittest unittest.mock contextlib traceback warnings
inspect timeit urllib.parse urllib.request http.client http.server socket ssl email.message
gzip zipfile tarfile zlib struct array platform signal shlex pprint weakref abc types
"""
EVERYDAY = tuple(_EVERYDAY.split())
# Not documented: side effects on import (this, antigravity, readline), no display (tkinter and
# its users), packaging internals, modules deprecated for removal (PEP 594), `posix` (`os` serves
# the same functions under the names users know).
_SKIP = """
antigravity this readline rlcompleter tkinter turtle turtledemo idlelib lib2to3 ensurepip venv pydoc
pydoc_data site posix nt msilib winreg winsound msvcrt distutils imp asynchat asyncore smtpd aifc
audioop cgi cgitb chunk crypt imghdr mailcap nis nntplib ossaudiodev pipes sndhdr spwd sunau
telnetlib uu xdrlib sre_compile sre_constants sre_parse xxsubtype
"""
SKIP = frozenset(_SKIP.split())
# Submodules users import by their dotted names (sys.stdlib_module_names lists only top levels).
_SUBMODULES = """
os.path collections.abc concurrent.futures logging.handlers logging.config unittest.mock
urllib.parse urllib.request urllib.error urllib.robotparser http.client http.server http.cookies
http.cookiejar email.message email.utils email.mime.text email.policy importlib.metadata
importlib.resources importlib.util xml.etree.ElementTree xml.dom.minidom xml.sax
json.decoder multiprocessing.pool multiprocessing.shared_memory wsgiref.simple_server
ctypes.util dbm.sqlite3 asyncio.subprocess
"""
DEMO_DOC_MAP = {
    "doc_id": {"format": "pydoc:{id}"},
    "title": {"concat": [{"col": "title"}]},
    "body": {"concat": [{"col": "body"}]},
    "metadata": {"pick": ["kind"]},
}
DEMO_CHUNKING = {"unit": "chars", "chunk_size": 1000, "overlap": 100, "min_chunk_size": 200}


def module_names() -> tuple[str, ...]:
    """Everyday modules first, then every other public module of this Python's standard library."""
    others = {name for name in sys.stdlib_module_names if not name.startswith("_") and name not in SKIP}
    others.update(_SUBMODULES.split())
    return EVERYDAY + tuple(sorted(others - set(EVERYDAY)))


# -- the corpus ------------------------------------------------------------------------------
Doc = tuple[int, int, str, str, str]  # (tier, order, kind, title, body)


def _topics(tier: int) -> Iterator[Doc]:
    """The language reference as help() shows it, less the topics mostly repeated by smaller ones
    ("specialnames" is "customization" + "attribute-access" + ...)."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    for order, (name, text) in enumerate(sorted(topics.items(), key=lambda item: len(item[1]))):
        paragraphs = [p.strip() for p in text.strip().split("\n\n") if p.strip()]
        repeated = sum(len(p) for p in paragraphs[1:] if p in seen)
        seen.update(paragraphs[1:])
        if repeated > 0.6 * sum(len(p) for p in paragraphs[1:]):
            continue
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        heading = lines[0] if lines else name
        yield tier, order, "language reference", f"{heading} ({name})", text.strip()


def _public_members(module: Any, module_name: str) -> Iterator[tuple[str, Any]]:
    """The functions and classes a module offers: its __all__, else its public names defined there
    (or in its C accelerator, `_csv` for csv); all of builtins (open's home is io)."""
    exported = getattr(module, "__all__", None)
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or not (inspect.isroutine(value) or inspect.isclass(value)):
            continue
        home = str(getattr(value, "__module__", None) or "")
        defined_here = home in (module_name, module.__name__) or home.rsplit(".", 1)[-1].startswith("_")
        if module_name == "builtins" or (name in exported if exported is not None else defined_here):
            yield name, value


def _docstrings(tier_of: dict[str, int]) -> Iterator[Doc]:
    documented: set[int] = set()  # id() of every object documented: a re-export is described once
    for order, module_name in enumerate(tier_of):
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001 - a module missing from this build is simply left out
            continue
        tier = tier_of[module_name]
        members = [(n, v) for n, v in _public_members(module, module_name) if id(v) not in documented]
        summary = [inspect.getdoc(module) or ""]
        for attr_name, value in members:
            documented.add(id(value))
            first = (inspect.getdoc(value) or "").strip().split("\n\n", 1)[0].replace("\n", " ")
            summary.append(f"{attr_name}{_signature(value)}: {first}" if first else f"{attr_name}{_signature(value)}")
        if module_name != "builtins":
            body = summary[0] + ("\n\nContents:\n" + "\n".join(summary[1:]) if members else "")
            yield tier, order, "module", f"module {module_name}", _cut(body, MAX_SUMMARY_CHARS)
        for attr_name, value in members:
            for kind, title, doc in _member_docs(module_name, attr_name, value):
                yield tier, order, kind, title, doc


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: text.rfind("\n", 0, limit)].rstrip() + "\n..."


def _member_docs(module_name: str, attr_name: str, value: Any) -> Iterator[tuple[str, str, str]]:
    qualified = f"{module_name}.{attr_name}"
    doc = inspect.getdoc(value)
    builtin = module_name == "builtins"  # list.sort, dict.get, sorted, open, ...: asked about most
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
    except Exception:  # noqa: BLE001 - TypeError/ValueError mostly; curses' defaults raise AttributeError
        return ""


def corpus_documents() -> list[tuple[str, str, str]]:
    """(kind, title, body) in sync order: tier, then KIND_PRIORITY, then the module order."""
    names = module_names()
    tier_of = {name: 0 if name in EVERYDAY else 2 for name in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated aliases (typing.io, ...) warn when inspected
        documents = [*_docstrings(tier_of), *_topics(1)]
    documents.sort(key=lambda doc: (doc[0], KIND_PRIORITY[doc[2]], doc[1]))  # stable: source order within
    return [(kind, title, body) for _, _, kind, title, body in documents]


def build_corpus(path: Path, *, max_docs: int = MAX_DOCS, max_chars: int = MAX_CORPUS_CHARS) -> int:
    """Write the corpus file (replacing any earlier one); returns the number of documents.

    The standard library is imported in a child process: the server that builds the demo on its
    first start does not keep a hundred modules it never uses."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    command = [sys.executable, "-c", _CHILD, str(tmp), str(max_docs), str(max_chars)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the demo corpus failed: {done.stderr.strip()[-500:]}")
    tmp.replace(path)  # atomic: a reader never sees half a corpus
    return int(done.stdout.strip().splitlines()[-1])


_CHILD = "import sys; from backends.retrieval.ingest.demo import write_corpus; print(write_corpus(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))"


def write_corpus(path: str, max_docs: int, max_chars: int) -> int:
    """The child's half of build_corpus: the documents, capped, into a new SQLite file."""
    rows, seen_bodies, total_chars = [], set(), 0
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    for kind, title, body in corpus_documents():
        if len(body) < MIN_DOC_CHARS or body in seen_bodies:
            continue  # one-liners retrieve badly; inherited docstrings repeat
        if len(rows) >= max_docs or total_chars + len(body) > max_chars:
            continue  # smaller documents further down may still fit
        seen_bodies.add(body)
        total_chars += len(body)
        rows.append((len(rows) + 1, kind, title, body, stamp))
    conn = apsw.Connection(path)  # a plain SQLite file (rollback journal): any reader opens it
    try:
        with conn:  # one transaction
            conn.execute(
                "CREATE TABLE python_docs (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, updated_at TEXT NOT NULL)"
            )
            conn.executemany("INSERT INTO python_docs VALUES (?, ?, ?, ?, ?)", rows)
    finally:
        conn.close()
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


def demo_to_sync(data_dir: Path, *, store: ConfigStore, first_start: bool) -> bool:
    """First start: build and register the demo. True when its sync is to run now (a first
    start, or a later one resuming a sync that never finished)."""
    data_dir = Path(data_dir)
    if store.cluster is not None or storage.shares_index(store.read_runtime()):
        # The demo is one machine's quick start: its corpus is a file in this data directory,
        # which a cluster's other instances (and a shared index) cannot read.
        log.info("no demo corpus: this gateway shares its configuration or its RAG index")
        return False
    if first_start:
        try:
            ensure_demo(data_dir, store)
        except Exception:  # the demo is a convenience: never stop the server from starting
            log.exception("could not set up the demo corpus")
            return False
    elif not (data_dir / CORPUS_FILE).exists():
        return False
    return demo_needs_sync(data_dir)


def start_demo_in_background(
    data_dir: Path, *, store: ConfigStore, first_start: bool, progress: bool = True
) -> threading.Thread | None:
    """First start: build and register the demo, then sync it in a background thread (progress
    bar on stderr) while the server starts. Later starts resume a sync that never finished."""
    if not demo_to_sync(data_dir, store=store, first_start=first_start):
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
