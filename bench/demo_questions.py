"""Everyday Python questions asked of the demo corpus's index, as a first-start user would.

    python bench/worker_memory.py --tree . --providers local --keep /tmp/demo-this ...
    python bench/demo_questions.py --data-dir /tmp/demo-this [--baseline-data-dir /tmp/demo-base] --json OUT

For each question: rag.search_hybrid (k=5) over the kept index, through the RAG handler with the
local model (the first start's embedder); the titles found and the rank of the first that answers
(a title prefix), so `answered_top3` counts the questions whose answer a user sees at once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

from report import emit  # noqa: E402

QUESTIONS: dict[str, tuple[str, ...]] = {
    "how do I start a thread": ("threading.Thread",),
    "read a file line by line": ("builtins.open(", "io.IOBase.readline", "io.TextIOWrapper", "fileinput"),
    "get the current date and time": ("datetime.datetime.now", "datetime.datetime.today", "time.localtime", "module datetime"),
    "parse a JSON string": ("json.loads(", "json.JSONDecoder"),
    "run a shell command and capture its output": ("subprocess.run(", "subprocess.check_output(", "module subprocess"),
    "sort a list of dictionaries by a key": ("builtins.list.sort(", "builtins.sorted(", "operator.itemgetter"),
    "list the files in a directory": ("os.listdir(", "os.scandir(", "pathlib.Path.iterdir", "glob.glob(", "os.walk("),
    "generate a random number": ("random.randint", "random.random", "random.randrange", "random.uniform", "module random"),
    "open a file": ("builtins.open(",),
    "split a string on commas": ("builtins.str.split(", "String Methods"),
}


def ask(data_dir: Path) -> dict[str, Any]:
    from gateway.runtime import build_runtime
    from gateway.services import Services
    from gateway.variables import all_variables
    from handlers.rag import RagHandler

    runtime = build_runtime(1, {"rag-embedding_provider": "local"}, {}, all_variables(RagHandler.variables))
    handler = RagHandler(Services(data_dir=data_dir, store=None, runtime=runtime, stats=None, metrics=None))
    asyncio.run(handler.init())
    spec = handler.find_tool("rag.search_hybrid")
    answers, top1, top3 = {}, 0, 0
    try:
        for question, expected in QUESTIONS.items():
            result = asyncio.run(handler.execute_tool(spec, {"query": question, "k": 5}, handler.context(spec, runtime)))
            titles = [hit["title"] for hit in result["structuredContent"]["results"]]
            rank = next((i + 1 for i, t in enumerate(titles) if t.startswith(expected)), None)
            top1 += rank == 1
            top3 += rank is not None and rank <= 3
            answers[question] = {"rank": rank, "titles": [t[:70] for t in titles]}
    finally:
        asyncio.run(handler.close())
    return {"questions": len(QUESTIONS), "answered_top1": top1, "answered_top3": top3, "answers": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, required=True, help="a data directory whose demo index is built")
    parser.add_argument("--baseline-data-dir", type=Path, help="another one, asked the same questions")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report: dict[str, Any] = {"load_average_1m": round(os.getloadavg()[0], 2)}
    began = time.perf_counter()
    report["this"] = ask(args.data_dir)
    if args.baseline_data_dir:
        report["baseline"] = ask(args.baseline_data_dir)
    report["elapsed_s"] = round(time.perf_counter() - began, 1)
    emit(report, args.json)


if __name__ == "__main__":
    main()
