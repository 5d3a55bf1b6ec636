#!/bin/sh
# cdictk-node-setup [setup | check | remove]: the cdictk DaemonSet's work on a node, run in its image
# (cdictk-daemonset.yaml, cdictk-cleanup.yaml).
#
#   setup   The init container, before the watcher and the device plugin start:
#           1. loads the NVIDIA modules and makes the control device nodes (best effort: a driver
#              container may load the driver later, and the watcher writes the spec when it does);
#           2. installs the node runtime this image carries (its Python, libraries and loader, with
#              cdictk) under RUNTIME_PREFIX on the node (`cdictk system install-runtime`): the spec's
#              hooks and cdictk-runtime run from there, so the node's own Python is never used. A new
#              version replaces the old only after it has run there;
#           3. registers the runtime's cdictk-runtime with containerd and turns CDI on (CONTAINERD=
#              restart: and restarts containerd when that changed its config; configure: writes the
#              config only; skip: leaves containerd alone).
#   check   The readiness probe of the watcher: the spec is there and loads, its hooks and the runtime
#           run on the node, and (unless CONTAINERD=skip) containerd's config turns CDI on and containerd
#           has loaded it (`cdictk system check-node`).
#   remove  The cleanup DaemonSet's init container, once the DaemonSet's pods are gone: containerd's
#           config as it was (restarted as setup would), the spec and the labels file removed, and the
#           runtime with the directories its install made. The node is as it was.
#
# Each step says what it did in one line on stderr ("cdictk-node-setup: STEP: ..."). The settings come
# from the environment (the cdictk ConfigMap); the paths are the manifests' mounts, which tests move.
set -eu

: "${DRIVER_ROOT:=/}"                    # the driver's root on the node: / or /run/nvidia/driver
: "${CONTAINERD:=restart}"               # restart, configure or skip
: "${PROC_ROOT:=/proc}"                  # the node's procfs, as the containers see it
: "${RUNTIME_PREFIX:=/opt/cdictk}"       # the node runtime's directory on the node
: "${RUNTIME_TARGET:=/host-opt-cdictk}"  # RUNTIME_PREFIX, where this container sees it (read-write)
: "${HOST_ROOT:=/host}"                  # the node's / (read-only)
: "${NODE_RUNTIME:=/usr/local/share/cdictk/node-runtime}" # the node runtime in this image
: "${CONTAINERD_DIR:=/etc/containerd}"   # the node's, at the same path: its imports name the drop-in
: "${SPEC:=/var/run/cdi/nvidia.yaml}"    # the watcher's spec, at the node's path
: "${LABELS:=/etc/kubernetes/node-feature-discovery/features.d/cdictk-gpu}" # the labeller's file

say() { echo "cdictk-node-setup: $*" >&2; }
fail() {
    say "$@"
    exit 1
}
# step NAME COMMAND...: runs COMMAND, says each line it printed as "NAME: LINE"; its status.
step() {
    name=$1
    shift
    status=0
    said=$("$@" 2>&1) || status=$?
    if [ -n "$said" ]; then
        printf '%s\n' "$said" | while IFS= read -r line; do say "$name: $line"; done
    fi
    return "$status"
}

case $CONTAINERD in
restart | configure | skip) ;;
*) fail "error: CONTAINERD=$CONTAINERD: want restart, configure or skip" ;;
esac
mode=${1:-setup}
case $mode in
setup | check | remove) ;;
*) fail "error: $mode: want setup, check or remove" ;;
esac

# containerd_step CHANGED UNCHANGED [FLAGS]: runtime configure for containerd with the node's paths
# and FLAGS, then the restart CONTAINERD asks for when that changed the config; the line says CHANGED or
# UNCHANGED. configure's own lines (each file, and a restart it leaves to us) only when it fails.
config=$CONTAINERD_DIR/config.toml
drop_in=$CONTAINERD_DIR/conf.d/99-cdictk.toml
containerd_step() {
    changed=$1 unchanged=$2
    shift 2
    before=$(sha256sum "$config" "$drop_in" 2>/dev/null || true)
    if ! said=$(cdictk runtime configure --runtime containerd --config "$config" \
        --drop-in-config "$drop_in" --enable-cdi --runtime-path "$RUNTIME_PREFIX/bin/cdictk-runtime" \
        "$@" 2>&1); then
        printf '%s\n' "$said" | while IFS= read -r line; do say "containerd: $line"; done
        fail "error: containerd: cannot change $config (above)"
    fi
    after=$(sha256sum "$config" "$drop_in" 2>/dev/null || true)
    if [ "$before" = "$after" ]; then
        say "containerd: $unchanged; no restart"
    elif [ "$CONTAINERD" = restart ]; then
        # In the node's mount namespace (hostPID), with the node's systemctl: a chroot would be refused.
        if ! nsenter --target 1 --mount -- systemctl restart containerd; then
            fail "error: containerd: $changed, but \`systemctl restart containerd\` failed on the node:" \
                "restart it yourself, and set CONTAINERD: configure"
        fi
        say "containerd: $changed; restarted"
    else
        say "containerd: $changed; restart containerd on this node to load it (CONTAINERD=configure)"
    fi
}

# The node's copy of a file this DaemonSet writes (the mounts are the node's paths).
remove_file() {
    if [ -e "$1" ] || [ -L "$1" ]; then
        rm -f "$1"
        say "$2: $1 removed"
    else
        say "$2: no $1"
    fi
}

case $mode in
setup)
    # 1. Modules and device nodes (a line for each made). The driver root's modprobe runs under chroot.
    if step "device nodes" cdictk system create-device-nodes --control-devices --load-kernel-modules \
        --driver-root "$HOST_ROOT$DRIVER_ROOT" --dev-root / --proc-root "$PROC_ROOT"; then
        say "device nodes: the NVIDIA control nodes are in /dev"
    else
        say "device nodes: warning: incomplete (above); the spec is written once the driver is there"
    fi
    # 2. The node runtime: its line says the version, copied or there already.
    if ! step "node runtime" cdictk system install-runtime --bundle "$NODE_RUNTIME" \
        --prefix "$RUNTIME_PREFIX" --target "$RUNTIME_TARGET" --host-root "$HOST_ROOT"; then
        fail "error: node runtime: not installed in $RUNTIME_PREFIX (above): GPU containers cannot start here"
    fi
    # 3. containerd.
    if [ "$CONTAINERD" = skip ]; then
        say "containerd: left alone (CONTAINERD=skip): its config must turn CDI on"
    else
        containerd_step "CDI turned on and $RUNTIME_PREFIX/bin/cdictk-runtime registered ($drop_in)" \
            "CDI on and $RUNTIME_PREFIX/bin/cdictk-runtime registered already ($drop_in)"
    fi
    ;;
check)
    set -- --host-root "$HOST_ROOT" --spec "$SPEC" --prefix "$RUNTIME_PREFIX"
    if [ "$CONTAINERD" != skip ]; then
        set -- "$@" --engine containerd
    fi
    exec cdictk system check-node "$@"
    ;;
remove)
    if [ "$CONTAINERD" = skip ]; then
        say "containerd: left alone (CONTAINERD=skip)"
    else
        containerd_step "$config as it was before cdictk, $drop_in removed" "nothing of cdictk's in $config" \
            --remove
        rmdir "${drop_in%/*}" 2>/dev/null || true # configure made it for the drop-in; kept if not empty
    fi
    remove_file "$SPEC" "spec"
    remove_file "$LABELS" "node labels"
    if ! step "node runtime" cdictk system uninstall-runtime --prefix "$RUNTIME_PREFIX" \
        --target "$RUNTIME_TARGET"; then
        fail "error: node runtime: not removed from $RUNTIME_PREFIX (above)"
    fi
    ;;
esac
