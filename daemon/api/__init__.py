"""The local HTTP API on the daemon's Unix socket: routes, the gate in front of them, fairness.

A request goes: headers (``protocol``: deadlines, sizes) → ``gate`` (who the caller
is, the body limit, the request schema of ``requests``, the caller's turn in
``fairness``) → the route in ``app`` → an answer or an error in ``answers``.
"""
