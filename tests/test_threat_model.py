"""docs/threat-model.md names a test behind every property: each named test must exist.

A renamed or deleted test would leave a property the document says is held with nothing holding it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "threat-model.md"
REFERENCE = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?(?:\s*\(([^)]*)\))?")


def test_every_row_names_a_test_and_every_named_test_exists() -> None:
    rows = [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    properties = [row for row in rows if not row.startswith(("| property", "| actor", "|---"))]
    assert len(properties) >= 30, "the entry points' tables are gone"
    missing = []
    for row in properties:
        found = list(REFERENCE.finditer(row))
        if not found and row.count("|") == 3:  # a property row: | property | test |
            missing.append(f"no test named: {row[:100]}")
        for match in found:
            path = ROOT / match.group(1)
            if not path.is_file():
                missing.append(f"{match.group(1)}: no such file")
                continue
            text = path.read_text(encoding="utf-8")
            names = ([match.group(2)] if match.group(2) else []) + re.findall(r"`(\w+)`", match.group(3) or "")
            missing += [f"{match.group(1)}::{n}: no such test" for n in names if f"def {n}(" not in text]
    assert not missing, "\n".join(missing)
