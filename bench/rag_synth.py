"""A deterministic synthetic corpus for the RAG latency bench (bench/rag_latency.py).

Text: words drawn from a Zipfian vocabulary (s = 1.07, 30k words, like English token counts)
mixed with a topic's own words, so keyword queries hit a realistic spread of posting-list sizes:
a topic word matches ~1/T of the corpus, a common word most of it.
Vectors: each chunk is its topic's centre plus Gaussian noise of the same norm (cosine to the
centre ~0.7, random pairs ~0), unit length — clustered like sentence embeddings, so the
ANN graph has real neighbourhoods to navigate and recall is not trivially 1.
Queries: held-out points of the same distribution (never an indexed vector) with 2-3 topic
words as their text, so FTS, vector and hybrid see the same intent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

VOCAB_SIZE = 30_000
ZIPF_S = 1.07
TOPIC_WORDS = 40
TOPIC_WORD_SHARE = 0.25  # of a chunk's words
NOISE = 1.0  # norm of the noise relative to the (unit) centre
SOURCES = (("stack_posts", 0.55), ("wiki_pages", 0.25), ("support_tickets", 0.15), ("release_notes", 0.05))
TAGS = 200
_SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["qu", "th", "sh", "ch", "st"]


def vocabulary(seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    words: set[str] = set()
    while len(words) < VOCAB_SIZE:
        n = int(rng.integers(1, 5))
        words.add("".join(rng.choice(_SYLLABLES, n)))
    return np.array(sorted(words, key=lambda w: (len(w), w)))  # short words get the high ranks


@dataclass
class Chunk:
    rowid_hint: int  # position in generation order (1-based): the rowid a fresh index gives it
    doc_id: str
    chunk_index: int
    source_index: int
    title: str
    body: str
    topic: int


@dataclass
class Doc:
    doc_id: str
    source_index: int
    title: str
    metadata: dict
    chunks: list[Chunk]


class Corpus:
    def __init__(self, n_chunks: int, dim: int, *, seed: int = 1) -> None:
        self.n_chunks, self.dim, self.seed = n_chunks, dim, seed
        self.topics = max(50, n_chunks // 500)
        rng = np.random.default_rng(seed)
        self.vocab = vocabulary()
        ranks = np.arange(1, VOCAB_SIZE + 1, dtype=np.float64)
        self.zipf_cdf = np.cumsum(ranks**-ZIPF_S / np.sum(ranks**-ZIPF_S))
        self.words = self.vocab.tolist()
        # Topic words come from the middle and tail of the vocabulary: distinctive, like jargon.
        self.topic_words = rng.integers(300, VOCAB_SIZE, size=(self.topics, TOPIC_WORDS))
        centres = rng.standard_normal((self.topics, dim)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)

    def vectors_for(self, topics: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        noise = rng.standard_normal((len(topics), self.dim)).astype(np.float32) * (NOISE / np.sqrt(self.dim))
        x = self.centres[topics] + noise
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    def _text(self, rng: np.random.Generator, topic: int, n_words: int) -> str:
        general = np.minimum(np.searchsorted(self.zipf_cdf, rng.random(n_words)), VOCAB_SIZE - 1)
        own = self.topic_words[topic, rng.integers(0, TOPIC_WORDS, n_words)]
        words = self.words
        return " ".join([words[i] for i in np.where(rng.random(n_words) < TOPIC_WORD_SHARE, own, general).tolist()])

    def documents(self, *, batch_chunks: int = 20_000) -> Iterator[tuple[list[Doc], np.ndarray]]:
        """(documents, their chunk vectors in chunk order) in batches; 1-3 chunks a document."""
        rng = np.random.default_rng(self.seed + 1)
        source_cdf = np.cumsum([share for _, share in SOURCES])
        made = 0
        doc_no = 0
        while made < self.n_chunks:
            docs: list[Doc] = []
            topics: list[int] = []
            while made < self.n_chunks and len(topics) < batch_chunks:
                doc_no += 1
                topic = int(rng.integers(0, self.topics))
                source_index = min(int(np.searchsorted(source_cdf, rng.random())), len(SOURCES) - 1)
                n_chunks = min(int(rng.integers(1, 4)), self.n_chunks - made)
                title = self._text(rng, topic, int(rng.integers(4, 10)))
                doc_id = f"{SOURCES[source_index][0]}:{doc_no}"
                metadata = {
                    "Score": int(rng.zipf(2.0)) - 1,
                    "PostTypeId": int(rng.integers(1, 3)),
                    "CreationDate": f"{2010 + int(rng.integers(0, 15))}-{1 + int(rng.integers(0, 12)):02d}-15T12:00:00Z",
                    "Tags": "".join(f"<tag{(topic * 7 + j) % TAGS}>" for j in range(int(rng.integers(1, 4)))),
                }
                chunks = []
                for index in range(n_chunks):
                    made += 1
                    body = self._text(rng, topic, int(rng.integers(60, 140)))
                    chunks.append(Chunk(made, doc_id, index, source_index, title, body, topic))
                    topics.append(topic)
                docs.append(Doc(doc_id, source_index, title, metadata, chunks))
            yield docs, self.vectors_for(np.array(topics), rng)

    def queries(self, count: int, *, seed: int = 99) -> tuple[list[str], np.ndarray]:
        rng = np.random.default_rng(seed)
        topics = rng.integers(0, self.topics, count)
        texts = [" ".join(self.vocab[rng.choice(self.topic_words[t], int(rng.integers(2, 4)), replace=False)]) for t in topics]
        return texts, self.vectors_for(topics, rng)
