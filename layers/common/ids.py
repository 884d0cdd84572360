"""Identifiers every layer agrees on.

Agent and project ids end up in file-system paths (``agents/<id>-workspace``,
``agents/<id>/qmd/…``), so they are restricted to a character set that cannot
express a path trick (no ``/``, no ``..``, no leading dot or dash).
"""

from __future__ import annotations

import re

from protocol.vocabulary import AGENT_ID_PATTERN

_ID_RE = re.compile(AGENT_ID_PATTERN)

MAIN_AGENT = "main"

# An agent of another host as the hub knows it (issue 48): ``HOST/AGENT``, each part an agent id.  No local
# agent id holds a "/", so a spoke's agent never collides with one of the hub's, and every host's ``main``
# is a different identity.  Only the project registry and the hub's peer API take this form.
FLEET_MEMBER_PATTERN = "^(?:" + AGENT_ID_PATTERN.strip("^$") + "/)?" + AGENT_ID_PATTERN.strip("^$") + "$"


class InvalidIdError(ValueError):
    """An agent or project id that does not match :data:`AGENT_ID_PATTERN`."""


def is_valid_id(value: str) -> bool:
    """True when ``value`` is usable as an agent or project id."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def check_id(value: str, kind: str = "agent") -> str:
    """Return ``value`` unchanged, or raise :class:`InvalidIdError` explaining the rule."""
    if not is_valid_id(value):
        raise InvalidIdError(
            f"invalid {kind} id {value!r}: use 1-64 characters from a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    return value
