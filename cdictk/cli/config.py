"""``cdictk config``: the runtime settings file."""

from __future__ import annotations

import click

# Every key of the settings (cdictk.startpath.shim.settings.KEYS) at its default, each explained; a
# test holds it to exactly those keys, in their order, and to what a missing file means.
DEFAULT_CONFIG = """\
# cdictk's runtime settings (/etc/cdictk/config.toml). Every key is shown at its default.

[runtime]
# The low-level runtimes cdictk-runtime hands containers to; the first one found wins. A name is
# looked up in PATH, an absolute path is used as it is.
runtimes = ["runc", "crun"]
# Where CDI specs are read from; for a device defined in several, the last directory wins.
spec-dirs = ["/etc/cdi", "/var/run/cdi"]
# Spec files that someone other than root could change (a file, a directory on the way to it, or
# where a symlink leads, owned by another user or writable by group or others) are skipped with a
# warning: their hooks would run as root. True reads them anyway (rootless and test setups only).
accept-untrusted-specs = false

[node]
# When no spec in spec-dirs defines the default kind (below), cdictk-runtime discovers the node and
# makes its spec in memory for each container, as `cdictk cdi generate` would write it (slower: keep a
# generated spec on disk). Set it to false to refuse such requests instead.
generate-when-missing = true
# Where the driver's files, /dev, procfs and sysfs are (a driver container: driver-root =
# "/run/nvidia/driver").
driver-root = "/"
dev-root = "/"
proc-root = "/proc"
sys-root = "/sys"

[requests]
# The kind given to unqualified ids in NVIDIA_VISIBLE_DEVICES ("0" becomes "nvidia.com/gpu=0").
default-kind = "nvidia.com/gpu"
# Annotations whose keys start with one of these ask for CDI devices (comma lists of names).
annotation-prefixes = ["cdi.k8s.io/"]
# Honour NVIDIA_VISIBLE_DEVICES in containers without CAP_SYS_ADMIN. Off: CUDA images set
# NVIDIA_VISIBLE_DEVICES=all themselves, so an unprivileged container (a pod that asked for no GPU)
# would get every GPU. Ask with a CDI name, an annotation, docker run --gpus (the legacy hook) or a
# device plugin's cdi or volume-mounts strategy instead. True is NVIDIA's default, for nodes where
# only trusted users start containers.
accept-env-unprivileged = false
# Kinds besides default-kind that NVIDIA_VISIBLE_DEVICES and volume mounts may name
# ("example.com/gpu=0"); annotations may name any kind.
env-kinds = []
# Honour requests made as /dev/null mounts onto /var/run/nvidia-container-devices/<device>.
accept-volume-mounts = false
# Honour annotations in configs that carry io.container.manager: podman copies the image's own
# annotations into them, CRI-O every annotation of the pod (its author's). Off: ask with
# podman run --device nvidia.com/gpu=0 (podman's CDI); CRI-O applies the kubelet's CDI requests itself.
accept-copied-annotations = false
"""


@click.group("config")
def config_group() -> None:
    """cdictk-runtime's settings file (/etc/cdictk/config.toml, or $CDICTK_CONFIG)."""


@config_group.command("default")
def default_command() -> None:
    """Print the settings file with every key at its default, each explained.

    To start a node's configuration: cdictk config default > /etc/cdictk/config.toml
    """
    click.echo(DEFAULT_CONFIG, nl=False)
