"""Throughput of the local embedding model, side by side with the naive way of running it.

For batch sizes 1, 16 and 64, on three kinds of passage from the Cranfield corpus (short: titles,
~17 tokens; medium: the first 60 words of an abstract, ~80 tokens; long: whole abstracts, ~190
tokens after truncation at 256, the size of a typical RAG chunk), measures passages/s of:

  ours      LocalEmbedder: truncation at 256, padding to the longest text of a length-sorted batch
  baseline  the tokenizer file's own settings: every text padded/truncated to a fixed 128 tokens,
            no sorting (what loading tokenizer.json as-is gives you)
  hash      HashEmbedder, the deterministic stand-in other components benchmark with

and reports ours/baseline ratios. Prints JSON; --json OUT also writes it to a file.

    python bench/embed_throughput.py [--seconds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backends.retrieval.embeddings import HashEmbedder, LocalEmbedder  # noqa: E402
from backends.retrieval.embeddings.local import TOKENIZER_PATH, _LoadedModel  # noqa: E402

CORPUS = Path(os.environ.get("CRANFIELD_DIR", "/work/shared/data/cranfield")) / "corpus.jsonl"
BATCH_SIZES = (1, 16, 64)


def load_passages(limit: int = 512) -> dict[str, list[str]]:
    titles, abstracts = [], []
    with CORPUS.open() as handle:
        for line in handle:
            doc = json.loads(line)
            if doc["title"].strip() and doc["text"].strip():
                titles.append(doc["title"])
                abstracts.append(doc["text"])
            if len(titles) == limit:
                break
    medium = [" ".join(text.split()[:60]) for text in abstracts]  # ~80 tokens: a small chunk
    return {"short": titles, "medium": medium, "long": abstracts}


def fixed_128_baseline(model: _LoadedModel) -> _LoadedModel:
    """Same session, the tokenizer exactly as the file configures it (fixed 128 padding/truncation)."""
    from tokenizers import Tokenizer

    return _LoadedModel(Tokenizer.from_file(str(TOKENIZER_PATH)), model.session, model.input_names)


def passages_per_s(embed, passages: list[str], batch_size: int, seconds: float) -> float:
    embed(passages[:batch_size])  # warm-up: first run allocates the arena
    done, position, started = 0, 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        batch = passages[position : position + batch_size]
        if len(batch) < batch_size:
            position, batch = 0, passages[:batch_size]
        embed(batch)
        done += len(batch)
        position += batch_size
    return done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="measuring time per cell")
    parser.add_argument("--json", type=Path, help="also write the JSON result here")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    passages = load_passages()
    ours = LocalEmbedder().load()
    baseline = fixed_128_baseline(ours._model())
    hashing = HashEmbedder(dim=384)
    results = []
    for kind, texts in passages.items():
        # Real (unpadded) length after our 256-token truncation: the attention mask counts it.
        encodings = ours._model().tokenizer.encode_batch(texts[:256])
        mean_tokens = float(np.mean([sum(e.attention_mask) for e in encodings]))
        for batch_size in BATCH_SIZES:
            ours.batch_size = batch_size
            row = {
                "passages": kind,
                "mean_tokens": round(mean_tokens, 1),
                "batch_size": batch_size,
                "ours_per_s": passages_per_s(ours.embed, texts, batch_size, args.seconds),
                "baseline_fixed128_per_s": passages_per_s(baseline.embed_batch, texts, batch_size, args.seconds),
                "hash_per_s": passages_per_s(hashing.embed, texts, batch_size, min(args.seconds, 1.0)),
            }
            row["ratio_ours_vs_baseline"] = row["ours_per_s"] / row["baseline_fixed128_per_s"]
            results.append({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)  # progress on the terminal

    report = {
        "bench": "embed_throughput",
        "model_id": ours.model_id,
        "intra_op_threads": ours.intra_op_threads,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "seconds_per_cell": args.seconds,
        # Other work on the machine skews every figure: above ~2 on 2 cores, compare ratios only.
        "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        "results": results,
        "note": "baseline truncates at 128 tokens, so on long passages it also does less work than ours (256)",
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
