"""Validated YAML files whose errors name the file, the key path and the line.

The data is read with ``yaml.safe_load`` and validated by a pydantic model, which
knows the key path of every problem; PyYAML's composed node tree knows where each
key stands in the file.  Putting the two together turns "wrong type" into
``memstrata.yaml: watch.debounce_ms (line 7): Input should be a valid integer``.
Duplicate keys, which ``safe_load`` silently collapses, are reported too.

These files are hostile input (the main agent can write the project registry),
so before anything builds a tree the text passes :func:`check_shape`: at most
:data:`MAX_BYTES`, UTF-8, nesting at most :data:`MAX_DEPTH` deep, and no anchors
or aliases.  PyYAML's composer recurses per nesting level (3,000 ``[`` raise
RecursionError, which is not a YAMLError) and an alias bomb expands
exponentially in anything that walks the tree; the event stream that is
checked here is produced without recursion and before any expansion.  Files
are opened without blocking and checked to be regular first (a FIFO would
hang the reader).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml

from protocol.locations import MAX_CONFIG_BYTES, NotRegularFileError, read_bounded

M = TypeVar("M", bound=pydantic.BaseModel)

MAX_BYTES = MAX_CONFIG_BYTES  # a configuration or registry is a few KiB; anything larger is a mistake or an attack
MAX_DEPTH = 50  # the deepest real file nests 4 levels

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a YAML file."""

    key: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.key} " if self.key else ""
        at = f"(line {self.line})" if self.line else ""
        sep = ": " if where or at else ""
        return f"{where}{at}".strip() + sep + self.message


class YamlFileError(ValueError):
    """A YAML file that cannot be used; ``str()`` lists every problem with its location."""

    def __init__(self, path: Path | str, problems: list[Problem]) -> None:
        self.path = Path(path)
        self.problems = problems
        lines = [f"{self.path}: {p}" for p in problems]
        super().__init__("\n".join(lines))


class StrictModel(pydantic.BaseModel):
    """Base for file models: unknown keys and silent type coercion are errors."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


def format_key(path: KeyPath) -> str:
    """``("watch", "debounce_ms")`` → ``watch.debounce_ms``; list indexes as ``[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":  # pydantic's marker for "the mapping key itself is invalid"
            out += " (key)"
        elif str(part).replace("_", "").replace("-", "").isalnum():
            out += ("." if out else "") + str(part)
        else:
            out += f"[{str(part)!r}]"
    return out


def _line_of(root: yaml.Node | None, path: KeyPath) -> int | None:
    """Line (1-based) of the deepest node on ``path`` that exists in the file."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in path:
        child = None
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if getattr(key_node, "value", None) == str(part):
                    child = value_node
                    line = key_node.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            child = node.value[part]
            line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line


def _duplicate_keys(node: yaml.Node | None, path: KeyPath = ()) -> list[Problem]:
    problems: list[Problem] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(getattr(key_node, "value", ""))
            if key in seen:
                problems.append(Problem(format_key((*path, key)), key_node.start_mark.line + 1, "duplicate key"))
            seen.add(key)
            problems.extend(_duplicate_keys(value_node, (*path, key)))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            problems.extend(_duplicate_keys(item, (*path, i)))
    return problems


def _line_of_offset(text: str | bytes, offset: int) -> int:
    newline = b"\n" if isinstance(text, bytes) else "\n"
    return text.count(newline, 0, offset) + 1  # type: ignore[arg-type]


def read_text(path: Path, limit: int = MAX_BYTES) -> str:
    """The file's text, read without ever blocking or reading without bound.

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` before reading: a FIFO,
    a device or a directory is refused instead of hanging the reader.  A missing
    file raises FileNotFoundError (callers give it their own meaning); every
    other problem is a :class:`YamlFileError` naming the file (and the line of
    a byte that is not UTF-8).
    """
    try:
        raw = read_bounded(path, limit)  # protocol/locations.py: the one bounded, non-blocking read
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise YamlFileError(path, [Problem("", None, f"cannot read file: {exc.strerror}")]) from None
    except NotRegularFileError as exc:
        raise YamlFileError(path, [Problem("", None, f"{exc} (refused: it could block the reader)")]) from None
    except ValueError as exc:  # over the limit, or grew past it while being read
        raise YamlFileError(path, [Problem("", None, str(exc))]) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = _line_of_offset(raw, exc.start)
        problem = f"file is not valid UTF-8 (byte 0x{raw[exc.start]:02x})"
        raise YamlFileError(path, [Problem("", line, problem)]) from None


_BRACKETS = re.compile(r"[\[\]{}]")


def _check_flow_depth(path: Path, text: str, max_depth: int) -> None:
    """Refuse deep ``[[[…`` / ``{{{…`` by counting brackets, before PyYAML's scanner sees them.

    The scanner keeps a possible simple key per open flow level and revisits
    them all on every token, so 3,000 open brackets cost it a third of a second
    before the first event (and 256 KiB of them, minutes).  Brackets inside
    quoted scalars are counted too: only a file with more than ``max_depth``
    unmatched ones is refused, and no real configuration has that.
    """
    depth = 0
    for match in _BRACKETS.finditer(text):
        if match.group() in "[{":
            depth += 1
            if depth > max_depth:
                line = _line_of_offset(text, match.start())
                raise YamlFileError(path, [Problem("", line, f"nested more than {max_depth} levels deep")])
        elif depth:
            depth -= 1


def check_shape(path: Path, text: str, max_depth: int = MAX_DEPTH, limit: int = MAX_BYTES) -> None:
    """Refuse what would make building the tree recurse or expand without bound.

    Works on PyYAML's event stream, which the parser produces with an explicit
    stack (no recursion) and before any alias is resolved; it stops at the first
    problem, so a hostile file costs well under a millisecond per KiB.
    """
    if len(text) > limit or len(text.encode("utf-8", "surrogatepass")) > limit:
        raise YamlFileError(path, [Problem("", None, f"text is over {limit:,} bytes, the limit")])
    _check_flow_depth(path, text, max_depth)
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1 if event.start_mark else None
        if isinstance(event, yaml.AliasEvent):
            raise YamlFileError(
                path, [Problem("", line, f"aliases (*{event.anchor}) are not accepted: write the value out")]
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise YamlFileError(path, [Problem("", line, f"anchors (&{anchor}) are not accepted: write the value out")])
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise YamlFileError(path, [Problem("", line, f"nested more than {max_depth} levels deep")])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def read_yaml(path: Path, text: str | None = None) -> tuple[Any, yaml.Node | None]:
    """Parse ``path`` into (data, node tree); any problem becomes :class:`YamlFileError`."""
    if text is None:
        try:
            text = read_text(path)
        except FileNotFoundError:
            raise YamlFileError(path, [Problem("", None, "cannot read file: No such file or directory")]) from None
    try:
        check_shape(path, text)
        # One parse for both the node tree (lines, duplicate keys) and the data: what safe_load would
        # build from the same text (it composes this node and constructs it), without parsing twice.
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        message = f"invalid YAML: {exc.problem or exc}"
        if exc.context and exc.context_mark:
            message += f" ({exc.context} started at line {exc.context_mark.line + 1})"
        raise YamlFileError(path, [Problem("", line, message)]) from exc
    except yaml.YAMLError as exc:
        raise YamlFileError(path, [Problem("", None, f"invalid YAML: {exc}")]) from exc
    except RecursionError:  # cannot happen past check_shape; never let it end a caller
        raise YamlFileError(path, [Problem("", None, "nested too deeply")]) from None
    duplicates = _duplicate_keys(node)
    if duplicates:
        raise YamlFileError(path, duplicates)
    return data, node


def validate(model: type[M], data: Any, path: Path, node: yaml.Node | None = None) -> M:
    """Validate ``data`` against ``model``; every error carries key path and line."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise YamlFileError(path, [Problem("", 1, "the top level must be a mapping of keys")])
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            message = err["msg"]
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            elif err["type"] == "missing":
                message = "required value is missing"
            problems.append(Problem(format_key(loc), _line_of(node, loc), message))
        raise YamlFileError(path, problems) from exc


def line_of(node: yaml.Node | None, path: KeyPath) -> int | None:
    """Public form of the line lookup, for checks a model cannot express."""
    return _line_of(node, path)
