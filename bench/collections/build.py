"""Build the evaluation collections beside Cranfield, in BEIR layout, from Debian documentation packages.

    python bench/collections/build.py            # downloads the pinned .debs with apt-get download
    python bench/collections/build.py --debs DIR # or takes them from DIR (checked by sha256)

Writes bench/collections/<name>/{corpus.jsonl.gz, queries.jsonl, qrels.tsv, manifest.json}:

- pg-manual (technical manual): PostgreSQL 15 documentation. Documents are sections (sect1 intros,
  sect2 with their sect3s, reference pages without their name line); queries are section titles
  ("Partial Indexes") and the reference pages' purpose lines ("define a new index"). A document's
  title is its parent's (chapter or sect1), or a reference page's command name, never its own.
- python-qa (question/answer): the Python 3.11 FAQ. Queries are the FAQ questions, the relevant
  passage is the answer under each; distractors are sections of the tutorial, HOWTOs, library and
  language reference.
- python-keywords (keyword-style): the Python 3.11 general index. Queries are concept index
  entries (`.. index::` terms such as "augmented assignment", "string literal"), relevant are the
  sections that hold the entry's anchor (all of them when a term is indexed in several places).

The leak rule, the same for all three: a query is dropped when its normalised text (lower case,
runs of non-alphanumerics as one space) occurs inside the normalised title + body of any of its
relevant documents. A section title that is also its body's first words, or a question restated
in its answer, would otherwise test string matching rather than retrieval. Queries shared by
several targets in pg-manual ("Examples", "Notes") are dropped as ambiguous. Bodies are cut at
MAX_BODY_CHARS on a line break (one chunk each at the chunker's 4,000 characters); an index anchor
past the cut does not count.

Everything is deterministic (sorted inputs, seeded samples): the same .debs give the same files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import htmltext  # noqa: E402

HERE = Path(__file__).resolve().parent
MAX_BODY_CHARS = 3000
MIN_BODY_CHARS = 200
SEED = 12

PACKAGES = {
    "postgresql-doc-15": {
        "version": "15.20-0+deb12u1",
        "sha256": "4c44bf2c599f208b3f46454a6cf7a72e25ec46ff74d37b59dd31ad76b00eebb7",
        "licence": "PostgreSQL Licence (permissive, BSD-like); /usr/share/doc/postgresql-doc-15/copyright",
        "root": "usr/share/doc/postgresql-doc-15/html",
    },
    "python3.11-doc": {
        "version": "3.11.2-6+deb12u9",
        "sha256": "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be",
        "licence": "PSF License Agreement for Python 3.11 (documentation), Zero-Clause BSD (code in it); html/license.html",
        "root": "usr/share/doc/python3.11/html",
    },
}


@dataclass
class Doc:
    doc_id: str
    title: str
    body: str
    anchors: dict[str, int] = field(default_factory=dict)  # index anchor -> character offset in body


def normalise(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def leaks(query: str, docs: list[Doc]) -> bool:
    needle = normalise(query)
    return any(needle in normalise(f"{d.title} {d.body}") for d in docs)


def cut(body: str) -> str:
    if len(body) <= MAX_BODY_CHARS:
        return body
    head = body[:MAX_BODY_CHARS]
    return head[: head.rfind("\n")] if "\n" in head[MAX_BODY_CHARS // 2 :] else head


# -- fetching --------------------------------------------------------------------------------------
def unpack(package: str, debs: Path | None, into: Path) -> Path:
    spec = PACKAGES[package]
    name = f"{package}_{spec['version']}_all.deb".replace(":", "%3a")
    if debs is None:
        debs = into / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        if not (debs / name).exists():
            subprocess.run(["apt-get", "download", f"{package}={spec['version']}"], cwd=debs, check=True)
    deb = debs / name
    actual = hashlib.sha256(deb.read_bytes()).hexdigest()
    if actual != spec["sha256"]:
        raise SystemExit(f"{deb}: sha256 {actual}, expected {spec['sha256']}")
    target = into / package
    if not target.exists():
        target.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(target)], check=True)
    return target / spec["root"]


# -- pg-manual -------------------------------------------------------------------------------------
def _pg_title(node: ET.Element) -> str:
    for h in node.iter():
        if h.tag in ("h1", "h2", "h3", "h4") and "title" in htmltext.classes(h):
            raw = htmltext.text(h, skip=lambda e: "id_link" in htmltext.classes(e))
            return re.sub(r"^(?:[A-Z]|\d+)(?:\.\d+)*\.\s+", "", raw).strip()
    return ""


def pg_manual(html_root: Path) -> tuple[list[Doc], dict[str, str], dict[str, list[str]]]:
    docs: list[Doc] = []
    query_of: dict[str, str] = {}
    for page in sorted(html_root.glob("*.html")):
        root = htmltext.parse(page.read_text(encoding="utf-8"))
        chapter, parent_of = "", None
        for th in root.iter("th"):
            if th.get("align") == "center" and th.get("width") == "60%":
                chapter = re.sub(r"^(?:Chapter|Appendix|Part)\s+\S+\s+", "", htmltext.text(th))
                break
        for node in root.iter("div"):
            kind = htmltext.classes(node) & {"sect1", "sect2", "refentry"}
            if not kind or not node.get("id"):
                continue
            kind = kind.pop()
            skip_classes = {"titlepage", "toc", "navheader", "navfooter", "refnamediv"}
            if kind == "sect1":
                skip_classes.add("sect2")

            def skip(e: ET.Element, skip_classes: set[str] = skip_classes) -> bool:
                return bool(htmltext.classes(e) & skip_classes)

            body = htmltext.text(node, skip=skip)
            if len(body) < MIN_BODY_CHARS:
                continue
            doc_id = f"pg-{node.get('id').lower()}"
            if kind == "refentry":
                names = [htmltext.text(s) for s in node.iter("span") if "refentrytitle" in htmltext.classes(s)]
                purpose = next(
                    (htmltext.text(p) for d in node.iter("div") if "refnamediv" in htmltext.classes(d) for p in d.iter("p")), ""
                )
                title = names[0] if names else ""
                query = purpose.split(" — ", 1)[1] if " — " in purpose else ""
            else:
                query = _pg_title(node)
                title = chapter
                if kind == "sect2":
                    parent_of = parent_of if parent_of is not None else htmltext.parents(root)
                    title = _pg_title(_enclosing(parent_of, node, "sect1")) or chapter
            docs.append(Doc(doc_id, title, cut(body)))
            if query:
                query_of[doc_id] = query
    counts = defaultdict(int)
    for q in query_of.values():
        counts[normalise(q)] += 1
    by_id = {d.doc_id: d for d in docs}
    queries, qrels = {}, {}
    for doc_id, q in query_of.items():
        if counts[normalise(q)] == 1 and len(normalise(q)) >= 3 and not leaks(q, [by_id[doc_id]]):
            qid = f"q-{doc_id}"
            queries[qid], qrels[qid] = q, [doc_id]
    return docs, queries, qrels


def _enclosing(parent_of: dict[ET.Element, ET.Element], node: ET.Element, css: str) -> ET.Element:
    current = parent_of.get(node)
    while current is not None and css not in htmltext.classes(current):
        current = parent_of.get(current)
    return current if current is not None else node


# -- Python docs: sections -------------------------------------------------------------------------
ANCHOR = re.compile(r"\u2063(index-\d+)\u2063")


def _is_heading(e: ET.Element) -> bool:
    return e.tag in ("h1", "h2", "h3", "h4", "h5", "h6")


def python_sections(html_root: Path, folders: tuple[str, ...]) -> list[tuple[str, str, Doc, str]]:
    """(folder, page, section doc, section heading) for every section with enough own text.

    A section's own text leaves out its heading and its subsections. Index anchors (empty spans
    with id index-N) become markers first, so their offsets in the text are known."""
    out = []
    for folder in folders:
        for page in sorted((html_root / folder).glob("*.html")):
            if page.name in ("index.html", "genindex.html"):
                continue
            root = htmltext.parse(page.read_text(encoding="utf-8"))
            h1 = next(root.iter("h1"), None)
            page_title = (
                htmltext.text(h1, skip=lambda e: "headerlink" in htmltext.classes(e)).rstrip("¶").strip()
                if h1 is not None
                else ""
            )
            for node in root.iter():
                if node.get("id", "").startswith("index-") and node.tag == "span" and not len(node):
                    node.text = f"\u2063{node.get('id')}\u2063"
            for section in root.iter("section"):
                heading = next((c for c in section if _is_heading(c)), None)
                head = (
                    htmltext.text(heading, skip=lambda e: "headerlink" in htmltext.classes(e)).rstrip("¶").strip()
                    if heading is not None
                    else ""
                )

                def skip(e: ET.Element) -> bool:
                    return e.tag == "section" or _is_heading(e) or "headerlink" in htmltext.classes(e)

                raw = htmltext.text(section, skip=skip)
                anchors, pieces, last = {}, [], 0
                for m in ANCHOR.finditer(raw):
                    pieces.append(raw[last : m.start()])
                    anchors[m.group(1)] = sum(len(p) for p in pieces)
                    last = m.end()
                pieces.append(raw[last:])
                body = htmltext.tidy("".join(pieces))
                if len(body) < MIN_BODY_CHARS:
                    continue
                doc_id = f"py-{folder}-{page.stem}-{section.get('id')}"
                kept = cut(body)
                doc = Doc(doc_id, page_title, kept, {a: o for a, o in anchors.items() if o < len(kept)})
                out.append((folder, page.stem, doc, head))
    return out


def python_qa(html_root: Path, *, docs_total: int = 1800) -> tuple[list[Doc], dict[str, str], dict[str, list[str]]]:
    answers, queries, qrels = [], {}, {}
    for _folder, page, doc, head in python_sections(html_root, ("faq",)):
        if not head.endswith("?") or leaks(head, [doc]):
            continue
        doc.doc_id = f"faq-{page}-{len(answers)}"
        answers.append(doc)
        qid = f"q-{doc.doc_id}"
        queries[qid], qrels[qid] = head, [doc.doc_id]
    pool = [doc for _, _, doc, _ in python_sections(html_root, ("tutorial", "howto", "library", "reference"))]
    distractors = random.Random(SEED).sample(pool, min(len(pool), docs_total - len(answers)))
    return answers + sorted(distractors, key=lambda d: d.doc_id), queries, qrels


def python_keywords(
    html_root: Path, *, max_queries: int = 600, docs_total: int = 2000
) -> tuple[list[Doc], dict[str, str], dict[str, list[str]]]:
    folders = ("tutorial", "howto", "library", "reference")
    sections = python_sections(html_root, folders)
    where = {(f"{folder}/{page}.html", anchor): doc for folder, page, doc, _ in sections for anchor in doc.anchors}
    targets: dict[str, set[str]] = defaultdict(set)
    shown: dict[str, str] = {}
    for query, href in _index_entries(html_root / "genindex-all.html"):
        page, _, anchor = href.partition("#")
        doc = where.get((page, anchor))
        if doc is not None and re.fullmatch(r"index-\d+", anchor):
            targets[normalise(query)].add(doc.doc_id)
            shown.setdefault(normalise(query), query)
    by_id = {doc.doc_id: doc for _, _, doc, _ in sections}
    candidates = sorted(
        key
        for key, ids in targets.items()
        if 1 <= len(ids) <= 8 and len(key) >= 3 and not leaks(shown[key], [by_id[i] for i in ids])
    )
    picked = sorted(random.Random(SEED).sample(candidates, min(max_queries, len(candidates))))
    queries = {f"q{n}": shown[key] for n, key in enumerate(picked)}
    qrels = {f"q{n}": sorted(targets[key]) for n, key in enumerate(picked)}
    relevant = {i for ids in qrels.values() for i in ids}
    rest = sorted(set(by_id) - relevant)
    extra = random.Random(SEED).sample(rest, max(0, min(len(rest), docs_total - len(relevant))))
    return [by_id[i] for i in sorted(relevant | set(extra))], queries, qrels


def _index_entries(path: Path) -> list[tuple[str, str]]:
    """(query, href) of the general index: "term" alone or "term subterm" for nested entries."""
    root = htmltext.parse(path.read_text(encoding="utf-8"))
    out = []
    for table in root.iter("table"):
        if "genindextable" not in htmltext.classes(table):
            continue
        for ul in table.iter("ul"):
            for li in (c for c in ul if c.tag == "li"):
                term = _clean_term(htmltext.text(li, skip=lambda e: e.tag == "ul").split(",")[0])
                for a in (c for c in li if c.tag == "a"):
                    out.append((term, a.get("href", "")))
                for sub_ul in (c for c in li if c.tag == "ul"):
                    for sub in (c for c in sub_ul if c.tag == "li"):
                        subterm = _clean_term(htmltext.text(sub).split(",")[0])
                        for a in (c for c in sub if c.tag == "a"):
                            out.append((f"{term} {subterm}".strip(), a.get("href", "")))
    return out


def _clean_term(raw: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"\([^)]*\)|\[\d+\]", " ", raw)).strip()


# -- writing -----------------------------------------------------------------------------------------
def write(name: str, kind: str, package: str, docs: list[Doc], queries: dict[str, str], qrels: dict[str, list[str]]) -> dict:
    out = HERE / name
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.body}, ensure_ascii=False) + "\n" for d in docs)
    # mtime=0: the same input gives the same bytes
    (out / "corpus.jsonl.gz").write_bytes(gzip.compress(lines.encode(), compresslevel=9, mtime=0))
    (out / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n" for q, t in queries.items())
    )
    rows = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q, ids in qrels.items() for d in ids]
    (out / "qrels.tsv").write_text("\n".join(rows) + "\n")
    spec = PACKAGES[package]
    manifest = {
        "name": name,
        "kind": kind,
        "source_package": f"Debian {package} {spec['version']}",
        "deb_sha256": spec["sha256"],
        "licence": spec["licence"],
        "docs": len(docs),
        "queries": len(queries),
        "qrels": sum(len(v) for v in qrels.values()),
        "mean_query_words": round(sum(len(t.split()) for t in queries.values()) / max(1, len(queries)), 2),
        "leak_rule": "no query's normalised text occurs in the normalised title + body of a relevant document",
        "max_body_chars": MAX_BODY_CHARS,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debs", type=Path, help="directory holding the pinned .deb files (default: apt-get download)")
    parser.add_argument("--work", type=Path, help="where to unpack (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="collections-") as tmp:
        work = args.work or Path(tmp)
        pg = unpack("postgresql-doc-15", args.debs, work)
        py = unpack("python3.11-doc", args.debs, work)
        made = [
            write(
                "pg-manual", "technical manual: section titles and purpose lines -> sections", "postgresql-doc-15", *pg_manual(pg)
            ),
            write("python-qa", "question/answer: FAQ questions -> answer passages", "python3.11-doc", *python_qa(py)),
            write("python-keywords", "keyword-style: index terms -> indexed sections", "python3.11-doc", *python_keywords(py)),
        ]
    print(json.dumps(made, indent=2))


if __name__ == "__main__":
    main()
