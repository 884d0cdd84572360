"""Without an LLM each turn of a conversation is a memory: do the assistant's turns crowd out what the user said?

mem0 with ``infer=False`` stores every non-system message with its role.  An assistant's turn such as
"Got it! I'll remember that you're vegetarian." talks *about* the user and can outrank the user's own
statement for "what do you know about me?".  This measures, with the local e5 model, where the user's
own statements rank among a conversation's turns for questions about the user, with the assistant's
relevance as it is and weighted by ``ASSISTANT_WEIGHT`` (layers/conversation/adapters/store.py), ordered
as L4's search orders.

Run: ``.venv/bin/python -m bench.bench_roles``.
"""

from __future__ import annotations

import sys

import numpy as np

from daemon.common.config import DEFAULT_MODEL_PATH
from layers.local.models.vectors import LocalEmbedder

CONVERSATIONS = [
    [
        ("user", "I'm a vegetarian and allergic to nuts."),
        ("assistant", "Got it! I'll remember your dietary preferences."),
    ],
    [
        ("user", "Hi, I'm Alex. I work as a nurse in Boston."),
        ("assistant", "Hey Alex! I'll remember that you're a nurse in Boston."),
    ],
    [
        ("user", "I'm not a big fan of thriller movies but I love sci-fi movies."),
        ("assistant", "Got it! I'll avoid thriller recommendations and suggest sci-fi movies in the future."),
    ],
    [
        ("user", "我住在上海，每天坐地铁上班。"),
        ("assistant", "好的，我记住了你住在上海，坐地铁通勤。"),
    ],
    [
        ("user", "My daughter's birthday is on March 3rd."),
        ("assistant", "Noted! I'll remind you before March 3rd."),
    ],
]
QUESTIONS = [
    "what do you know about me?",
    "tell me about myself",
    "what are my preferences?",
    "你知道我的哪些情况？",
    "what should you remember about me",
]
WEIGHTS = (1.0, 0.8, 0.7, 0.6, 0.5, 0.0)


def main() -> int:
    embedder = LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)
    turns = [t for conversation in CONVERSATIONS for t in conversation]
    vectors = embedder.embed_passages([text for _, text in turns])
    roles = np.array([role for role, _ in turns])
    print(f"{len(turns)} turns, {len(QUESTIONS)} questions about the user")
    for weight in WEIGHTS:
        user_first, user_in_top5 = 0, []
        for question in QUESTIONS:
            cosines = vectors @ embedder.embed_query(question)
            # L4's order: the unclamped relevance (layers/local/models/vectors.py pair_relevance), then the cosine
            texts = [text for _, text in turns]
            pairs = zip(cosines, texts, strict=True)
            scores = np.array([max(0.0, embedder.pair_relevance(c, question, t)) for c, t in pairs])
            weights = np.where(roles == "assistant", weight, 1.0)
            order = np.lexsort((-cosines * weights, -scores * weights))
            user_first += roles[order[0]] == "user"
            user_in_top5.append(int(np.sum(roles[order[:5]] == "user")))
        print(
            f"assistant weight {weight:.1f}: a user's statement ranks first for {user_first}/{len(QUESTIONS)} "
            f"questions; user statements in the top 5: {np.mean(user_in_top5):.1f} of 5"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
