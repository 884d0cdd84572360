"""The LLM consolidation asks (``conversation.llm``: any OpenAI-compatible chat endpoint).

Two questions, each answered in JSON and checked before anything acts on it: which of several
statements of one subject are outdated (and by which), and what one knowledge memory says for a
group of task logs.  An answer that is not JSON, names a statement that was not asked about, or
has a statement replace itself is an error: the finding stays reported, nothing is applied.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_ANSWER_BYTES = 256 * 1024
MAX_SUMMARY_CHARS = 2000

OUTDATED_PROMPT = """You maintain an agent's long-term memory. The statements below are about one subject and were \
written at the times shown. Decide which of them are OUTDATED: replaced by a later statement that says the fact \
changed. Statements that are all true at once (different items, different people) are not outdated.
Answer with JSON only: {"outdated": [{"index": <outdated statement>, "replaced_by": <the statement that replaces it>}]}
and an empty list when none is outdated.

"""

SUMMARY_PROMPT = """You maintain an agent's long-term memory. Below are task log entries about one task. Write ONE \
short knowledge memory (at most three sentences, in the language of the entries) that keeps what a later reader \
needs: what was done, the outcome, and any numbers, names or versions that matter.
Answer with JSON only: {"summary": "<the memory>"}

"""


class JudgeError(RuntimeError):
    """The LLM could not be asked, or its answer cannot be used (the message says which)."""


@dataclass(frozen=True)
class Statement:
    text: str
    created_at: str


class LlmJudge:
    """Asks ``model`` at ``base_url`` (``…/v1``); ``api_key`` travels as a bearer token."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 120.0) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.calls = 0

    def outdated(self, statements: Sequence[Statement]) -> list[tuple[int, int]]:
        """``(outdated, replaced_by)`` index pairs into ``statements``; each outdated one once."""
        listing = "\n".join(f"[{i}] ({s.created_at or 'unknown time'}) {s.text}" for i, s in enumerate(statements))
        answer = self._ask(OUTDATED_PROMPT + listing)
        items = answer.get("outdated")
        if not isinstance(items, list):
            raise JudgeError("the answer has no list 'outdated'")
        pairs: dict[int, int] = {}
        for item in items:
            old = item.get("index") if isinstance(item, dict) else None
            new = item.get("replaced_by") if isinstance(item, dict) else None
            valid = {i for i in range(len(statements))}
            if not isinstance(old, int) or not isinstance(new, int) or old not in valid or new not in valid:
                raise JudgeError(f"the answer names a statement that was not asked about: {item!r}"[:300])
            if old == new:
                raise JudgeError(f"the answer has statement {old} replace itself")
            pairs[old] = new
        if set(pairs) & set(pairs.values()):
            raise JudgeError("the answer has a statement both outdated and replacing another")
        return sorted(pairs.items())

    def summary(self, logs: Sequence[Statement]) -> str:
        listing = "\n".join(f"- ({s.created_at or 'unknown time'}) {s.text}" for s in logs)
        text = self._ask(SUMMARY_PROMPT + listing).get("summary")
        if not isinstance(text, str) or not text.strip():
            raise JudgeError("the answer has no text 'summary'")
        text = text.strip()
        if len(text) > MAX_SUMMARY_CHARS:
            raise JudgeError(f"the summary is {len(text):,} characters; at most {MAX_SUMMARY_CHARS:,} are kept")
        return text

    def _ask(self, prompt: str) -> dict[str, Any]:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [{"role": "user", "content": prompt}],
        }
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body, ensure_ascii=False).encode(),
            headers=headers,
            method="POST",
        )
        self.calls += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise JudgeError(f"the LLM answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise JudgeError(f"the LLM could not be reached: {getattr(exc, 'reason', exc)}") from None
        if len(raw) > MAX_ANSWER_BYTES:
            raise JudgeError(f"the LLM's answer is over {MAX_ANSWER_BYTES:,} bytes")
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError("the LLM's answer is not a chat completion") from None
        return _json_in(str(content))


def _json_in(content: str) -> dict[str, Any]:
    """The JSON object in ``content``, also when wrapped in a code fence or a sentence."""
    match = re.search(r"\{.*\}", content, re.DOTALL)
    try:
        value = json.loads(match.group() if match else content)
    except ValueError:
        raise JudgeError("the LLM's answer holds no JSON object") from None
    if not isinstance(value, dict):
        raise JudgeError("the LLM's answer is not a JSON object")
    return value
