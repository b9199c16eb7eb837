"""Just enough HTML for the collection builder: a tolerant element tree and its readable text.

The standard library's HTMLParser feeds a small xml.etree tree (no lxml on the machine, and the
Sphinx and DocBook pages the collections come from are regular enough).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from html.parser import HTMLParser

VOID = frozenset(["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"])
BLOCK = frozenset(
    [
        "p",
        "div",
        "section",
        "li",
        "ul",
        "ol",
        "dl",
        "dt",
        "dd",
        "pre",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "tr",
        "table",
        "blockquote",
        "br",
    ]
)
SKIPPED = frozenset(["script", "style", "head"])


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = ET.Element("root")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = ET.SubElement(self.stack[-1], tag, {k: v or "" for k, v in attrs})
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        ET.SubElement(self.stack[-1], tag, {k: v or "" for k, v in attrs})

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):  # close up to the matching open tag, if any
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        parent = self.stack[-1]
        if len(parent):
            parent[-1].tail = (parent[-1].tail or "") + data
        else:
            parent.text = (parent.text or "") + data


def parse(html: str) -> ET.Element:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


def classes(element: ET.Element) -> set[str]:
    return set(element.get("class", "").split())


def text(element: ET.Element, skip: Callable[[ET.Element], bool] = lambda e: False) -> str:
    """Readable text: block elements on their own lines, `skip`ped subtrees left out (their tail kept)."""
    parts: list[str] = []

    def walk(node: ET.Element) -> None:
        block = node.tag in BLOCK
        if block:
            parts.append("\n")
        if node.text:
            parts.append(node.text)
        for child in node:
            if child.tag not in SKIPPED and not skip(child):
                walk(child)
            if child.tail:
                parts.append(child.tail)
        if block:
            parts.append("\n")

    walk(element)
    return tidy("".join(parts))


def tidy(raw: str) -> str:
    lines = [re.sub(r"[ \t\r\f\v\u00a0]+", " ", line).strip() for line in raw.split("\n")]
    out, blank = [], False
    for line in lines:
        if line:
            out.append(line)
            blank = False
        elif not blank and out:
            out.append("")
            blank = True
    return "\n".join(out).strip()


def iter_all(element: ET.Element, predicate: Callable[[ET.Element], bool]) -> Iterator[ET.Element]:
    for node in element.iter():
        if predicate(node):
            yield node


def parents(root: ET.Element) -> dict[ET.Element, ET.Element]:
    return {child: parent for parent in root.iter() for child in parent}
