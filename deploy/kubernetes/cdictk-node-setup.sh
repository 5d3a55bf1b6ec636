#!/bin/sh
# cdictk-node-setup: the init container of the cdictk DaemonSet (cdictk-daemonset.yaml), run before
# `cdictk cdi generate --watch` on every GPU node. It
#   1. loads the NVIDIA modules and makes the control device nodes (best effort: a driver container
#      may load the driver later, and the watcher writes the spec when it does);
#   2. copies cdictk's package to the node, at the path it has in this image, because the spec's
#      createContainer hook runs there: runc runs hooks on the node, where this image's files are not,
#      with the node's own Python (HOOK_PYTHON, 3.11 or newer), and fails if it cannot;
#   3. registers cdictk with containerd and turns CDI on (CONTAINERD=restart: and restarts containerd
#      when that changed its config; configure: writes only; skip: leaves containerd alone).
# Settings come from the environment (the DaemonSet's ConfigMap). The paths are the DaemonSet's mounts;
# the tests move them.
set -eu

: "${DRIVER_ROOT:=/}"                    # the driver's root on the node: / or /run/nvidia/driver
: "${HOOK_PYTHON:=/usr/bin/python3}"     # the node's Python that runs the hooks
: "${CONTAINERD:=restart}"               # restart, configure or skip
: "${HOST_ROOT:=/host}"                  # the node's / (read-only)
: "${NODE_INSTALL_DIR:=/host-opt-cdictk}" # the node's /opt/cdictk (read-write)
: "${PREFIX:=/opt/cdictk}"               # this image's virtual environment, the same path on the node
: "${CONTAINERD_DIR:=/etc/containerd}"   # the node's, at the same path: its imports name the drop-in
: "${RUNTIME_PATH:=$PREFIX/libexec/cdictk-runtime}" # written below, on the node

say() { echo "cdictk-node-setup: $*" >&2; }

case $CONTAINERD in
restart | configure | skip) ;;
*)
    say "error: CONTAINERD=$CONTAINERD: want restart, configure or skip"
    exit 1
    ;;
esac

# 1. Modules and device nodes. The driver root's own modprobe runs under chroot.
if ! cdictk system create-device-nodes --control-devices --load-kernel-modules \
    --driver-root "$HOST_ROOT$DRIVER_ROOT" --dev-root /; then
    say "warning: device nodes incomplete; the spec is written once the driver is there"
fi

# 2. The hooks on the node, replaced only when they differ (a container starting during the swap
# would fail its hook once and be restarted by the kubelet).
package=${CDICTK_PACKAGE:-$(python -c 'import os, cdictk; print(os.path.dirname(cdictk.__file__))')}
case $package in
*/../* | */..) 
    say "error: cdictk's package path $package has a '..' in it"
    exit 1
    ;;
"$PREFIX"/*) ;;
*)
    say "error: cdictk is at $package, outside $PREFIX"
    exit 1
    ;;
esac
target=$NODE_INSTALL_DIR${package#"$PREFIX"}
if ! diff -r -q -x __pycache__ "$package" "$target" >/dev/null 2>&1; then
    mkdir -p "$(dirname "$target")"
    rm -rf "$target.new" "$target.old"
    cp -a "$package" "$target.new"
    if [ -e "$target" ]; then mv "$target" "$target.old"; fi
    mv "$target.new" "$target"
    rm -rf "$target.old"
    say "installed cdictk's hooks on the node at $package"
fi
entry=$package/hooks/__main__.py
if ! chroot "$HOST_ROOT" "$HOOK_PYTHON" -I -S -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    ! chroot "$HOST_ROOT" "$HOOK_PYTHON" -I -S "$entry" --help >/dev/null; then
    say "error: $HOOK_PYTHON on the node cannot run cdictk's hooks ($entry): they need Python 3.11" \
        "or newer; install one, or name another in HOOK_PYTHON (the cdictk ConfigMap)"
    exit 1
fi

# cdictk-runtime on the node, for the RuntimeClass route (NVIDIA_VISIBLE_DEVICES), as
# `cdictk runtime install-launchers` writes it elsewhere: a shell front that execs the low-level
# runtime itself for state, start, kill and delete (and a create that cannot be asking for a GPU), and
# cdictk-runtime.py behind it, which runs the node's Python isolated and without site, on the copied
# package and then the node Python's own package directories, where the PyYAML it needs to parse a spec
# it has not cached is. The directories go to a file beside it, one per line, never into its source:
# whatever the node's Python prints (a .pth file may print too) can only be a wrong path, not code.
site=${package%/cdictk}
libexec=$NODE_INSTALL_DIR/libexec
mkdir -p "$libexec"
launcher=$libexec/cdictk-runtime.py
front=$libexec/cdictk-runtime
{
    echo "$site"
    chroot "$HOST_ROOT" "$HOOK_PYTHON" -I -c 'import sys; print("\n".join(p for p in sys.path if p.startswith("/")))'
} >"$launcher.path.new"
{
    echo "#!$HOOK_PYTHON -IS"
    echo "# Written by cdictk-node-setup (the cdictk DaemonSet): cdictk-runtime with the node's Python."
    echo "import sys"
    echo "with open(__file__ + '.path') as paths: sys.path += [p for p in paths.read().splitlines() if p[:1] == '/']"
    echo "from cdictk.runtime.shim import main; sys.exit(main())"
} >"$launcher.new"
chmod 0644 "$launcher.path.new"
chmod 0755 "$launcher.new"
mv -f "$launcher.path.new" "$launcher.path"
mv -f "$launcher.new" "$launcher"
# The front, last: this image's cdictk writes its text with the node's paths and the runtimes and
# annotation prefixes of the node's /etc/cdictk/config.toml (missing: the defaults). The front takes
# its shortcuts only while that file is unchanged since (still missing, or not newer than the front),
# so the text is written after it is read; after editing the file, restart this pod.
node_launcher=$PREFIX${launcher#"$NODE_INSTALL_DIR"}
node_front=$PREFIX${front#"$NODE_INSTALL_DIR"}
python -I -B -m cdictk.runtime.shimfront --front "$node_front" --launcher "$node_launcher" \
    --root "$HOST_ROOT" --written-by "cdictk-node-setup (the cdictk DaemonSet)" >"$front.new"
chmod 0755 "$front.new"
mv -f "$front.new" "$front"
rm -f "$front.path" # the Python launcher's, from when it was cdictk-runtime itself
if ! chroot "$HOST_ROOT" "$node_front" --help >/dev/null; then
    say "error: the node's cdictk-runtime ($node_front) does not start"
    exit 1
fi
if ! chroot "$HOST_ROOT" "$HOOK_PYTHON" -I -S -c \
    "import sys; sys.path += open('$node_launcher.path').read().splitlines(); import yaml"; then
    say "warning: the node's $HOOK_PYTHON has no PyYAML: cdictk-runtime there (the cdictk RuntimeClass," \
        "for NVIDIA_VISIBLE_DEVICES) cannot read a spec it has not cached; install python3-yaml"
fi

# 3. containerd.
if [ "$CONTAINERD" = skip ]; then
    exit 0
fi
config=$CONTAINERD_DIR/config.toml
drop_in=$CONTAINERD_DIR/conf.d/99-cdictk.toml
before=$(sha256sum "$config" "$drop_in" 2>/dev/null || true)
cdictk runtime configure --runtime containerd --config "$config" --drop-in-config "$drop_in" \
    --enable-cdi --runtime-path "$RUNTIME_PATH"
after=$(sha256sum "$config" "$drop_in" 2>/dev/null || true)
if [ "$before" = "$after" ]; then
    say "containerd's config is unchanged"
elif [ "$CONTAINERD" = restart ]; then
    # In the node's mount namespace (hostPID), with the node's systemctl: a chroot would be refused.
    say "restarting containerd to load its new config"
    nsenter --target 1 --mount -- systemctl restart containerd
else
    say "containerd's config changed: restart containerd on this node to use CDI"
fi
