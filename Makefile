# cdictk developer targets. `./quickstart TARGET` (the README's commands) first installs what is missing
# and creates the virtual environment, then runs `make TARGET`; on a machine already set up, `make TARGET`
# alone does the same. Every target runs in that virtual environment: the active one, else .venv.
# VENV and PYTHON come from the command line only: an exported PYTHON (node-gyp users have one) would
# otherwise send pip to a Python that PEP 668 closes.
ifneq ($(origin VENV),command line)
VENV := $(or $(VIRTUAL_ENV),$(CURDIR)/.venv)
endif
ifneq ($(origin PYTHON),command line)
PYTHON := $(VENV)/bin/python
endif
# The venv's scripts (cdictk, cdictk-runtime) first on PATH: the benches run them by name.
export PATH := $(abspath $(VENV))/bin:$(PATH)
SOURCES = cdictk tests bench examples realnode nodeimage

.PHONY: help setup test test-slow unit lint format bench bench-hooks bench-shim bench-prestart bench-api \
	bench-generate bench-k8s bench-deviceplugin bench-node-runtime bench-node-tarball demo real-node-bundle \
	node-launcher image node-tarball proto
.DEFAULT_GOAL := help

help:
	@echo "make demo | test | test-slow | unit | lint | format | bench | bench-hooks | bench-shim | bench-prestart | bench-api"
	@echo "     bench-generate [NVIDIA_CTK=PATH] | bench-k8s | bench-deviceplugin [AGAINST=DIR]"
	@echo "     bench-node-runtime | bench-node-tarball | real-node-bundle [NVIDIA_TOOLS=DIR] | node-launcher"
	@echo "     image | node-tarball | proto"
	@echo "Each runs in $(VENV) (VENV=DIR for another); ./quickstart TARGET first installs what is missing."

# The OS packages and the venv (./quickstart setup: apt-get as root on Debian and Ubuntu).
$(VENV)/bin/python:
	CDICTK_VENV=$(VENV) ./quickstart setup

# cdictk, editable, in the venv; again only when its metadata changed. The stamps live in the venv, so
# another venv gets its own install. Compat mode puts the clone on sys.path with a plain .pth line:
# setuptools' default editable finder costs every interpreter start about 9 ms, which the benches see.
EDITABLE = $(PYTHON) -m pip install -q --config-settings editable_mode=compat -e
$(VENV)/.cdictk-installed: pyproject.toml | $(VENV)/bin/python
	$(EDITABLE) .
	touch $@

# The same with the kubernetes extra and the developer's tools (pyproject.toml's dev dependency group:
# pytest, ruff, mypy, build, ...), for the test, lint and bench targets. pip reads dependency groups from
# 25.1 on: an older one in the venv (Debian 12's python3-venv brings 23.0) is upgraded first.
$(VENV)/.cdictk-test-installed: pyproject.toml | $(VENV)/bin/python
	$(PYTHON) -m pip install -q 'pip>=25.1'
	$(EDITABLE) '.[kubernetes]' --group dev
	touch $@ $(VENV)/.cdictk-installed

setup: $(VENV)/.cdictk-test-installed

# The main job on a machine without a GPU: build a fake eight-GPU node (gcc stubs, mknod nodes, a fake
# NVML; needs root), then generate, validate and print its spec. PRESET=single for a one-GPU node.
PRESET ?= eight
demo: $(VENV)/.cdictk-installed
	$(PYTHON) -m tests.fakenode demo --preset $(PRESET)

# The README's test command: host setup for the end-to-end tests (root; tests/setup-host.sh), then
# every test but the slow ones, measuring cdictk's branch coverage as they run: below the floor in
# pyproject.toml ([tool.coverage.report] fail_under) the command fails. `coverage report` afterwards
# lists what they left out, file by file.
test: $(VENV)/.cdictk-test-installed
	./tests/setup-host.sh
	$(PYTHON) -m pytest --cov --cov-report=

# The slow tests (marked `slow`): the README's two commands run on a pristine Debian 12 copy, which
# download from Debian's mirror and PyPI (about 2 minutes; root). CI runs them.
test-slow: $(VENV)/.cdictk-test-installed
	./tests/setup-host.sh
	$(PYTHON) -m pytest -m slow

unit: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m pytest tests/unit

lint: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m ruff check $(SOURCES)
	$(PYTHON) -m ruff format --check $(SOURCES)
	$(PYTHON) -m mypy

# The Python code of our .proto files (the device plugin API, the tests' CRI), generated again by the
# generators tests/protogen.py pins, from a venv of their own (build/protogen-venv, made on first use):
# after editing a .proto (tests/unit/test_protogen.py checks it).
proto: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m tests.protogen

format: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m ruff format $(SOURCES)
	$(PYTHON) -m ruff check --fix $(SOURCES)

bench: $(VENV)/.cdictk-test-installed
	$(PYTHON) bench/cdi_core.py
	$(PYTHON) -m bench.generate

# Container start with and without the generated spec's hooks (runc, crun), and the hook entry point's
# import time over a bare interpreter. Needs root; ROUNDS=N for more or fewer rounds.
ROUNDS ?= 30
bench-hooks: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.hooks --rounds $(ROUNDS)

# cdictk-runtime's create (it injects the device) against runc's create of the injected bundle, with
# NVIDIA_VISIBLE_DEVICES=0 and =void, a pass-through command, and where the shim's time goes (aim: at
# most 30 ms over runc). Needs root; ROUNDS=N for more or fewer rounds.
bench-shim: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.shim --rounds $(ROUNDS)

# A container start through the legacy prestart hook against the same start through the shim, and
# against runc with the spec injected beforehand (aim: at most 1.2 times the shim). Needs root.
bench-prestart: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.prestart --rounds $(ROUNDS)

# cdi generate, the whole process, on fake nodes of 1, 8, 16 and 32 GPUs (and 64 more driver libraries),
# round-robin with NVIDIA's nvidia-ctk on the same nodes (NVIDIA_CTK=PATH, default: the one built in
# /opt/nvidia-tools, else on PATH; empty: cdictk alone). Budgets: the eight-GPU node within 200 ms, the
# 32-GPU node faster than nvidia-ctk, linear in devices and libraries. Needs root.
NVIDIA_CTK ?= $(firstword $(wildcard /opt/nvidia-tools/nvidia-ctk) $(shell command -v nvidia-ctk))
bench-generate: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.generate --repeat $(ROUNDS) $(if $(NVIDIA_CTK),--nvidia-ctk $(NVIDIA_CTK))

# The library API's figures: a claim's spec built and written, 1,000 claims, gc over 10,000
# specs, SpecDirs's change latency, on the fake eight-GPU node with the spec dir on tmpfs. Needs root.
bench-api: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.api

# From the kubelet's Allocate to a running container through each Kubernetes path (the CRI's CDI field,
# cdi.k8s.io annotations, the cdictk RuntimeClass with annotations and with volume mounts) beside plain
# `ctr run` of the same image, on two containerd 2.x daemons (CDI on, CDI off) and the fake eight-GPU
# node. Needs root and what tests/setup-host.sh fetches; ROUNDS=N for more or fewer rounds.
bench-k8s: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.k8s --rounds $(ROUNDS)

# The device plugin's first answer after a start (to Register, to the first ListAndWatch list), whether
# the first GetPreferredAllocation after it has the topology, and its calls' latency with and without a
# peer's 32 streams open, on the fake eight-GPU node against the kubelet stand-in; AGAINST=DIR measures
# another checkout's plugin too, in turn (git archive main | tar -x -C DIR). Needs root.
AGAINST ?=
bench-deviceplugin: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.deviceplugin $(if $(AGAINST),--against $(AGAINST))

# The node runtime (docs/node-runtime.md): its size on a node, and the hook's start through it beside
# the same hook under /usr/bin/python3 (aims: 40 MiB, within 10%). Builds the runtime in a chroot of
# tests/fetch-rootfs.sh's bookworm-python root first (about a minute). Needs root and gcc.
bench-node-runtime: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.noderuntime --rounds $(ROUNDS)

# The node tarball (make node-tarball first): its size, and its unpacking, first install, install again
# and uninstall on fresh busybox-only nodes, medians of TARBALL_ROUNDS (each step a whole command; a
# round takes seconds, not milliseconds). Needs root and busybox-static.
TARBALL_ROUNDS ?= 5
bench-node-tarball: $(VENV)/.cdictk-test-installed
	$(PYTHON) -m bench.nodetarball --rounds $(TARBALL_ROUNDS)

# The node runtime's static launcher (gcc -static -Os, glibc's static library from libc6-dev), for
# `python -m cdictk.noderuntime build --launcher build/node-runtime/cdictk-launcher` in the image.
node-launcher: $(VENV)/.cdictk-installed
	$(PYTHON) -m cdictk.noderuntime launcher --output build/node-runtime/cdictk-launcher

# What to carry to a real GPU node (docs/development.md, "A real GPU node"): build/real-node-bundle, with
# the real-node-check script, wheels for CPython 3.11 and 3.12, runc, busybox, the CUDA probe and the node
# runtime of the image built first (make image); with NVIDIA_TOOLS=DIR, NVIDIA's nvidia-ctk,
# nvidia-cdi-hook and runtimes built in DIR too. Needs what make image needs, gcc, runc, busybox-static
# (tests/setup-host.sh installs them) and PyPI.
NVIDIA_TOOLS ?=
real-node-bundle: image
	$(PYTHON) -m realnode.bundle --out build/real-node-bundle --image build/image \
		$(if $(NVIDIA_TOOLS),--nvidia-tools $(NVIDIA_TOOLS))

# The DaemonSet's image, built here without a registry or a container engine (deploy/README.md): the
# cached Debian bookworm root with python3 (tests/fetch-rootfs.sh builds it once), and in a chroot of it
# deploy/kubernetes/image-root.sh, the script the Containerfile runs too. Writes build/image/oci (an OCI
# layout) and build/image/cdictk-VERSION.oci.tar, and prints the image's digest: the same clone, root
# and wheels give the same one. Needs root, debootstrap and gcc, and PyPI the first time (the pinned wheels).
ROOTFS_CACHE ?= $(or $(CDICTK_ROOTFS_CACHE),/var/cache/cdictk-tests/rootfs)
image: $(VENV)/.cdictk-installed
	./tests/fetch-rootfs.sh $(ROOTFS_CACHE) bookworm-python
	$(PYTHON) -m nodeimage build --rootfs $(ROOTFS_CACHE)/minbase-bookworm-python --out build/image

# The node tarball, for nodes without Kubernetes (README.md, "For node operators"): the node runtime of
# the image above, built once there, as build/cdictk-node-VERSION-ARCH.tar.gz, one directory that is
# the runtime; on the node, `./cdictk-node-VERSION/bin/cdictk system install` sets it up. Builds the
# image first; the same image gives the same bytes.
node-tarball: image
	$(PYTHON) -m nodeimage tarball --image build/image --out build
