"""Validated YAML files whose errors name the file, the key path and the line.

The data is read with ``yaml.safe_load`` and validated by a pydantic model, which
knows the key path of every problem; PyYAML's composed node tree knows where each
key stands in the file.  Putting the two together turns "wrong type" into
``memstrata.yaml: watch.debounce_ms (line 7): Input should be a valid integer``.
Duplicate keys, which ``safe_load`` silently collapses, are reported too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml

M = TypeVar("M", bound=pydantic.BaseModel)

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


def read_yaml(path: Path, text: str | None = None) -> tuple[Any, yaml.Node | None]:
    """Parse ``path`` into (data, node tree); syntax errors become :class:`YamlFileError`."""
    if text is None:
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise YamlFileError(path, [Problem("", None, f"cannot read file: {exc.strerror}")]) from exc
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YamlFileError(path, [Problem("", None, "file is not valid UTF-8")]) from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        message = f"invalid YAML: {exc.problem or exc}"
        if exc.context and exc.context_mark:
            message += f" ({exc.context} started at line {exc.context_mark.line + 1})"
        raise YamlFileError(path, [Problem("", line, message)]) from exc
    except yaml.YAMLError as exc:
        raise YamlFileError(path, [Problem("", None, f"invalid YAML: {exc}")]) from exc
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


def load_model(model: type[M], path: Path, text: str | None = None) -> M:
    """Read and validate one YAML file."""
    data, node = read_yaml(path, text)
    return validate(model, data, path, node)


def line_of(node: yaml.Node | None, path: KeyPath) -> int | None:
    """Public form of the line lookup, for checks a model cannot express."""
    return _line_of(node, path)
