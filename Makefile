# cdictk developer targets. `make test` is the README's test command: as root on Debian 12 it first
# installs what the end-to-end tests drive (runc, crun, podman, ...) and the project with its test extras.
PYTHON ?= python3
PIP ?= pip
SOURCES = cdictk tests bench

.PHONY: install test unit lint format bench bench-hooks bench-shim bench-prestart demo

install:
	$(PIP) install .

# The main job on a machine without a GPU: build a fake eight-GPU node (gcc stubs, mknod nodes, a fake
# NVML; needs root), then generate, validate and print its spec. PRESET=single for a one-GPU node.
PRESET ?= eight
demo:
	$(PYTHON) -m tests.fakenode demo --preset $(PRESET)

# Reinstall the project (editable, with test extras) only when its metadata changed.
.deps-stamp: pyproject.toml
	$(PIP) install -q -e '.[test]'
	touch $@

test: .deps-stamp
	./tests/setup-host.sh
	$(PYTHON) -m pytest

unit: .deps-stamp
	$(PYTHON) -m pytest tests/unit

lint: .deps-stamp
	$(PYTHON) -m ruff check $(SOURCES)
	$(PYTHON) -m ruff format --check $(SOURCES)
	$(PYTHON) -m mypy

format:
	$(PYTHON) -m ruff format $(SOURCES)
	$(PYTHON) -m ruff check --fix $(SOURCES)

bench: .deps-stamp
	$(PYTHON) bench/cdi_core.py
	$(PYTHON) -m bench.generate

# Container start with and without the generated spec's hooks (runc, crun), and the hook entry point's
# import time over a bare interpreter. Needs root; ROUNDS=N for more or fewer rounds.
ROUNDS ?= 30
bench-hooks: .deps-stamp
	$(PYTHON) -m bench.hooks --rounds $(ROUNDS)

# cdictk-runtime's create (it injects the device) against runc's create of the injected bundle, with
# NVIDIA_VISIBLE_DEVICES=0 and =void, a pass-through command, and where the shim's time goes (aim: at
# most 30 ms over runc). Needs root; ROUNDS=N for more or fewer rounds.
bench-shim: .deps-stamp
	$(PYTHON) -m bench.shim --rounds $(ROUNDS)

# A container start through the legacy prestart hook against the same start through the shim, and
# against runc with the spec injected beforehand (aim: at most 1.5 times the shim). Needs root.
bench-prestart: .deps-stamp
	$(PYTHON) -m bench.prestart --rounds $(ROUNDS)
