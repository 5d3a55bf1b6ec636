"""A container's environment and command line as the kubelet makes them: ``envFrom`` first (each
ConfigMap's keys, with its prefix), then ``env`` in order, each value with ``$(VAR)`` expanded from
what came before; then ``command`` and ``args`` expanded from the whole environment.

Kubernetes' expansion: ``$(NAME)`` is NAME's value when NAME is defined and stays as written when it
is not; ``$$`` is one ``$``; any other ``$`` is itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from tests.e2e.kubelet.manifest import ConfigMap, Container, ManifestError

# Environment variable names every kubelet takes from a ConfigMap's keys (envFrom): Kubernetes'
# IsEnvVarName. Newer ones (RelaxedEnvironmentVariableValidation) take any printable ASCII but "=".
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def expand(text: str, env: Mapping[str, str]) -> str:
    """``text`` with Kubernetes' ``$(VAR)`` references replaced from ``env``."""
    out: list[str] = []
    at = 0
    while at < len(text):
        char = text[at]
        if char != "$" or at + 1 == len(text):
            out.append(char)
            at += 1
            continue
        following = text[at + 1]
        if following == "$":
            out.append("$")
            at += 2
        elif following == "(":
            end = text.find(")", at + 2)
            if end == -1:  # no closing bracket: the rest as written
                out.append(text[at:])
                break
            name = text[at + 2 : end]
            out.append(env[name] if name in env else text[at : end + 1])
            at = end + 1
        else:
            out.append(char)
            at += 1
    return "".join(out)


def container_env(
    container: Container,
    config_map: Callable[[str], ConfigMap | None],
    fields: Mapping[str, str],
    skipped: list[str],
) -> dict[str, str]:
    """The container's environment, in order. ``config_map(name)`` finds a ConfigMap of the pod's
    namespace; ``fields`` are the downward API's values (``metadata.name``...); keys of a ConfigMap that
    are no variable names are left out and named in ``skipped``, as the kubelet's event says."""
    env: dict[str, str] = {}
    for source in container.env_from:
        found = config_map(source.config_map)
        if found is None:
            if source.optional:
                continue
            raise ManifestError(f"container {container.name}: ConfigMap {source.config_map} not found")
        for key, value in found.data.items():
            name = source.prefix + key
            if _ENV_NAME.match(name):
                env[name] = value
            else:
                skipped.append(f"{source.config_map}: {name!r}")
    for variable in container.env:
        if variable.config_map_key is not None:
            ref = variable.config_map_key
            found = config_map(ref.name)
            if found is None or ref.key not in found.data:
                if ref.optional:
                    continue
                raise ManifestError(
                    f"container {container.name}: {variable.name}: {ref.name}[{ref.key}] not found"
                )
            env[variable.name] = found.data[ref.key]
        elif variable.field_path:
            env[variable.name] = fields[variable.field_path]
        else:
            env[variable.name] = expand(variable.value, env)
    return env


def command_line(container: Container, env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The container's command and args, expanded; empty ones leave the image's own."""
    return [expand(c, env) for c in container.command], [expand(a, env) for a in container.args]
