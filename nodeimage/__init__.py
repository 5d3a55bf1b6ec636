"""``make image``: the DaemonSet's image, built here from the Debian root the tests cache, without a registry.

Tooling, not part of the product: the wheel never carries it. tarlayer writes a directory tree as a
deterministic layer, ocilayout the OCI image layout and its archive, lockfile the pinned wheels,
imageroot runs ``deploy/kubernetes/image-root.sh`` in the Debian root (the script the Containerfile runs
too), makeimage ties them together and main is ``python -m nodeimage``.
"""


class ImageError(Exception):
    """The image cannot be built as asked: one line saying why."""
