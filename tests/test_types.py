"""The code's types hold: mypy, configured in pyproject.toml, finds nothing.

CI runs only ``make test``, so mypy runs here as well as in ``make lint``.  Its
cache (.cache/mypy, see the configuration) makes a second run take seconds; a
fresh clone builds it on the first.
"""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO_ROOT


def test_mypy_reports_nothing():
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-color-output", "--no-error-summary"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"mypy (configured in pyproject.toml) reports:\n{proc.stdout}{proc.stderr}"
