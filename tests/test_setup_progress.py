"""The first ``make setup`` says what it is doing while llama.cpp compiles (tools/long_step.py).

Before: after "building llama-cpp-python…" nothing was printed for the whole build
(24 minutes on a busy host).  The step runner is run here for real around a real
subprocess that prints a build tool's counters as ninja and make do; the Makefile is
checked to run the llama.cpp build through it on a cold cache (``make -n`` with an empty
wheel cache prints the commands it would run; the real cold build takes ~600
CPU-seconds, too long for CI: its figures are in the closing note of issue 28).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers import REPO_ROOT

LONG_STEP = REPO_ROOT / "tools" / "long_step.py"

FAKE_BUILD = textwrap.dedent(
    """
    import sys, time
    for i in range(1, 8):
        print(f"[{i}/7] Building C object ggml/src/part{i}.c.o", flush=True)
        time.sleep(0.3)
    sys.exit(int(sys.argv[1]))
    """
)


def _run(tmp_path, exit_code: int) -> subprocess.CompletedProcess:
    script = tmp_path / "build.py"
    script.write_text(FAKE_BUILD)
    command = [sys.executable, str(LONG_STEP), "--log", str(tmp_path / "build.log"), "--what", "building llama.cpp"]
    command += ["--every", "0.5", "--", sys.executable, str(script), str(exit_code)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_long_step_prints_elapsed_time_and_the_build_tools_step_count(tmp_path):
    proc = _run(tmp_path, 0)
    assert proc.returncode == 0, proc.stderr
    progress = [line for line in proc.stdout.splitlines() if line.startswith("  building llama.cpp: 0m")]
    assert len(progress) >= 2, proc.stdout
    assert any(" of 7 (log: " in line for line in progress), proc.stdout  # "step 3 of 7"
    assert proc.stdout.splitlines()[-1].startswith("  building llama.cpp: done in 0m")
    assert "[7/7] Building C object" in (tmp_path / "build.log").read_text(), "the whole output is in the log"
    assert "Building C object" not in proc.stdout, "the compiler's lines stay in the log"


def test_a_failed_step_exits_with_its_status_and_shows_the_end_of_its_log(tmp_path):
    proc = _run(tmp_path, 3)
    assert proc.returncode == 3
    assert "building llama.cpp: FAILED after" in proc.stderr and "(exit status 3)" in proc.stderr
    assert "[7/7] Building C object ggml/src/part7.c.o" in proc.stderr


def test_make_setup_builds_llama_cpp_through_the_step_runner_on_a_cold_cache(tmp_path):
    dry = subprocess.run(
        ["make", "-n", "-B", ".venv/.memstrata-setup", f"LLAMA_WHEELS={tmp_path / 'wheels'}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dry.returncode == 0, dry.stderr
    assert "tools/long_step.py --log .cache/llama-build.log" in dry.stdout
    assert "pip wheel -v" in dry.stdout and "CPU-seconds" in dry.stdout
    assert "tools/llama_source.py --version" in dry.stdout, "built from the source with common left out"
