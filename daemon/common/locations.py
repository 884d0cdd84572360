"""Where memstrata looks for its configuration, and OpenClaw's own root.

The lowest module of the house: the front's configuration cache, the pydantic
models and the installer all need these names, and none of them may import the others.
"""

from __future__ import annotations

from pathlib import Path

ENV_VAR = "MEMSTRATA_CONFIG"  # names the configuration file when --config does not
SYSTEM_CONFIG = Path("/etc/memstrata/memstrata.yaml")  # else this one, else the built-in defaults
OPENCLAW_ROOT = Path("/root/.openclaw")  # OpenClaw's own root: the defaults' and a new install's
