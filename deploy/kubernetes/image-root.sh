#!/bin/sh
# image-root.sh CONTEXT: cdictk's part of the DaemonSet's image, made inside the image's own root (as
# root, with Debian's python3 and python3-venv installed). Both ways of building the image run it: `make
# image` in a chroot of the Debian root the tests cache, the Containerfile as a RUN step; so both have
# one layout. CONTEXT holds what it installs, nothing of which stays in the image:
#   wheels/               cdictk's wheel and the wheels requirements.lock pins, with their hashes
#   requirements.lock     cdictk[kubernetes]'s dependencies, exact versions and hashes
#   launcher              the node runtime's static launcher (python -m cdictk.noderuntime launcher)
#   cdictk-node-setup.sh  the init container's script
# It writes below VENV, BUNDLE and /usr/local/bin only, never bytecode with a time in it, and so the
# same CONTEXT in the same root gives the same files.
set -eu

context=${1:?usage: image-root.sh CONTEXT}
# cdictk with the kubernetes extra, which the image's containers run (PATH has its bin/ first). Not
# /opt/cdictk: that is the node's prefix, where the init container installs the node runtime.
VENV=/usr/local/lib/cdictk-venv
# The node runtime (cdictk.noderuntime), built from this image's Python, that the init container copies
# to the node.
BUNDLE=/usr/local/share/cdictk/node-runtime
INIT=/usr/local/bin/cdictk-node-setup

say() { echo "image-root.sh: $*" >&2; }

# No .pyc beside what compileall writes below, and no pip configuration, cache or index of the
# machine's: the wheels in CONTEXT are all there is.
export PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore

for path in "$context/requirements.lock" "$context/launcher" "$context/cdictk-node-setup.sh"; do
    [ -f "$path" ] || { say "error: $path is missing"; exit 1; }
done
for path in "$VENV" "$BUNDLE" "$INIT"; do
    [ ! -e "$path" ] || { say "error: $path exists already: this root has been made once"; exit 1; }
done
# pip itself runs from Debian's own wheel (python3-venv brings it) and is not installed.
set -- /usr/share/python-wheels/pip-*.whl
[ -f "$1" ] || { say "error: no pip wheel in /usr/share/python-wheels (apt-get install python3-venv)"; exit 1; }
pip_wheel=$1
set -- "$context"/wheels/cdictk-*.whl
[ $# -eq 1 ] && [ -f "$1" ] || { say "error: want one cdictk wheel in $context/wheels"; exit 1; }
cdictk_wheel=$1

python3 -m venv --without-pip "$VENV"
pip() { "$VENV/bin/python" "$pip_wheel/pip" "$@"; }
# The dependencies by hash, then cdictk's own wheel (built from this clone, so not in the lock).
pip install --quiet --no-index --find-links "$context/wheels" --only-binary :all: --no-deps --no-compile \
    --require-hashes --requirement "$context/requirements.lock"
pip install --quiet --no-index --no-deps --no-compile "$cdictk_wheel[kubernetes]"
# What the lock lacks or pins against cdictk's own requirements shows here, not when a pod starts.
pip check >/dev/null || { pip check >&2; say "error: requirements.lock does not satisfy cdictk[kubernetes]"; exit 1; }
# Unchecked hash-based bytecode: no source time in it, and nothing to check on a read-only root.
"$VENV/bin/python" -m compileall -q --invalidation-mode unchecked-hash "$VENV/lib" >/dev/null

"$VENV/bin/python" -m cdictk.noderuntime build --output "$BUNDLE" --launcher "$context/launcher" >/dev/null
install -m 0755 "$context/cdictk-node-setup.sh" "$INIT"
