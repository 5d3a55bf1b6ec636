"""cdictk's node runtime: what GPU nodes run cdictk's hooks and runtime with, whatever their own Python.

runc runs a spec's hooks, ``cdictk-runtime`` and the legacy prestart hook on the node, where there may
be no Python, an older one, or no glibc at all. The runtime is a relocatable copy of the Python the
DaemonSet's image runs (Debian's, from its packages), its standard library less what cdictk never
imports, the shared libraries it links and the image's own dynamic loader, with cdictk and the
libraries its node commands need: :mod:`.assemble` makes it, :mod:`.install` puts it on a node under one
prefix (``/opt/cdictk``) and swaps versions atomically, :mod:`.selftest` is what a version runs before
it is used. Every name in its ``bin/`` is one static launcher (``launcher.c``) that execs the bundled
loader on the bundled interpreter, so the node needs only a Linux kernel and the image's CPU
architecture. docs/node-runtime.md says more.
"""
