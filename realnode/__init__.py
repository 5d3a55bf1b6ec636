"""The real-node check: what `make real-node-bundle` carries to a GPU node, and what runs there.

Everything here but :mod:`realnode.bundle` (which builds the bundle on a development machine) runs on a
bare GPU node before anything is installed: standard library only, Python 3.11 or newer.
"""
