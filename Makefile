# cdictk developer targets. `make test` is the README's test command: as root on Debian 12 it first
# installs what the end-to-end tests drive (runc, crun, podman, ...) and the project with its test extras.
PYTHON ?= python3
PIP ?= pip
SOURCES = cdictk tests bench

.PHONY: install test unit lint format bench

install:
	$(PIP) install .

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
