"""The answers the clients return, as the clients see them.

The typed answer documents (MemoryAnswer, SearchAnswer, StatusDocument and the TypedDicts they reference)
stay in daemon/common/contracts.py for now: the daemon builds them, mypy checks them there, and moving them
would take the status document's many sections along.  A client answer is typed here as a JSON object;
the daemon's front narrows it to the contract it knows (daemon/front/daemon_client.py).
"""

from __future__ import annotations

from typing import Any

# A JSON object as the daemon answers it.
Answer = dict[str, Any]
