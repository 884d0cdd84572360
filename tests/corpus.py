"""A generated mixed Chinese/English markdown corpus (tests and benchmarks share it).

Built so that a plain substring scan is the ground truth: every English word has
the same length (no word is inside another) and words are always separated, so
"contains the query" means the same thing for a substring scan and for a search.
About 38% of the characters are Chinese, drawn with a Zipf-like skew from 3,000
ideographs, with runs glued to English words and numbers (使用qdrant, 6333端口).
"""

from __future__ import annotations

import itertools
import random
import string

IDEOGRAPHS = [chr(0x4E00 + i * 7) for i in range(3000)]
TECH = ["qdrant", "sqlite", "docker", "agents", "memory", "vector"]
PUNCT_ZH = "，。；：！？、"


def _weights(n: int) -> list[float]:
    return [1.0 / (i + 1) ** 0.9 for i in range(n)]


class Corpus:
    def __init__(self, seed: int = 7, words: int = 2000) -> None:
        rng = random.Random(seed)
        self.rng = rng
        vocab: set[str] = set(TECH)
        while len(vocab) < words:
            vocab.add("".join(rng.choice(string.ascii_lowercase) for _ in range(6)))
        self.words = sorted(vocab)
        # cumulative weights, summed once: ``choices(weights=…)`` sums them again at every call (2,000
        # words: most of the time a 20,000-chunk workspace took to write); the draws are the same
        self._word_cum = list(itertools.accumulate(_weights(len(self.words))))
        self._char_cum = list(itertools.accumulate(_weights(len(IDEOGRAPHS))))

    def chinese(self, n: int) -> str:
        return "".join(self.rng.choices(IDEOGRAPHS, cum_weights=self._char_cum, k=n))

    def word(self) -> str:
        return self.rng.choices(self.words, cum_weights=self._word_cum)[0]

    def chunk(self, size: int = 400) -> str:
        rng = self.rng
        parts: list[str] = []
        length = 0
        while length < size:
            roll = rng.random()
            if roll < 0.30:
                piece = self.chinese(rng.randint(2, 9)) + rng.choice(PUNCT_ZH)
            elif roll < 0.36:
                piece = self.chinese(rng.randint(1, 4)) + self.word() + " "  # 使用qdrant
            elif roll < 0.40:
                piece = str(rng.choice([6333, 8080, 443, 22])) + self.chinese(2) + " "  # 6333端口
            else:
                piece = self.word() + rng.choice([" ", " ", ", ", ". ", "\n"])
            parts.append(piece)
            length += len(piece)
        return "".join(parts)

    def documents(self, files: int, chunks_per_file: int) -> list[tuple[str, str]]:
        """(path, markdown) pairs; every chunk sits under its own heading."""
        docs = []
        for f in range(files):
            sections = [f"## note {c} {self.word()}\n\n{self.chunk()}\n" for c in range(chunks_per_file)]
            docs.append((f"memory/2025-{f % 12 + 1:02d}-{f % 28 + 1:02d}-{f}.md", "\n".join(sections)))
        return docs
