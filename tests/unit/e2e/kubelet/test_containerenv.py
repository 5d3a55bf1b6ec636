"""A container's environment and command line as the kubelet makes them."""

from __future__ import annotations

import pytest

from tests.e2e.kubelet.containerenv import command_line, container_env, expand
from tests.e2e.kubelet.manifest import (
    ConfigMap,
    ConfigMapKeyRef,
    Container,
    EnvFrom,
    EnvVar,
    ManifestError,
    Meta,
)

ENV = {"A": "1", "B": "two"}


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("$(A)", "1"),
        ("x$(B)y$(A)", "xtwoy1"),
        ("$(C)", "$(C)"),  # undefined: as written
        ("$$(A)", "$(A)"),  # escaped
        ("$$", "$"),
        ("$A", "$A"),
        ("$(A", "$(A"),  # unterminated: as written
        ("a$", "a$"),
        ("$()", "$()"),
    ],
)
def test_expand(text: str, expanded: str) -> None:
    assert expand(text, ENV) == expanded


MAPS = {
    "base": ConfigMap(
        Meta("base"), {"DRIVER_ROOT": "/", "MODE": "a", "dotted.name": "x", "1ST": "y", "A B": "z"}
    ),
    "more": ConfigMap(Meta("more"), {"MODE": "b"}),
}


def environment(container: Container, skipped: list[str] | None = None) -> dict[str, str]:
    return container_env(container, MAPS.get, {"spec.nodeName": "node-1"}, [] if skipped is None else skipped)


def test_env_from_in_order_then_env_with_expansion() -> None:
    skipped: list[str] = []
    container = Container(
        "c",
        "i",
        env_from=(EnvFrom("base"), EnvFrom("more"), EnvFrom("more", prefix="P_")),
        env=(
            EnvVar("ROOT", "/host$(DRIVER_ROOT)"),
            EnvVar("EARLY", "$(LATE)"),
            EnvVar("LATE", "late"),
            EnvVar("NODE", field_path="spec.nodeName"),
            EnvVar("KEYED", config_map_key=ConfigMapKeyRef("more", "MODE")),
        ),
    )
    env = environment(container, skipped)
    assert env == {
        "DRIVER_ROOT": "/",
        "MODE": "b",  # the later source wins
        "dotted.name": "x",
        "P_MODE": "b",
        "ROOT": "/host/",
        "EARLY": "$(LATE)",  # not defined yet where it is used
        "LATE": "late",
        "NODE": "node-1",
        "KEYED": "b",
    }
    assert skipped == ["base: '1ST'", "base: 'A B'"]


def test_a_missing_config_map_fails_unless_optional() -> None:
    with pytest.raises(ManifestError, match="ConfigMap gone not found"):
        environment(Container("c", "i", env_from=(EnvFrom("gone"),)))
    assert environment(Container("c", "i", env_from=(EnvFrom("gone", optional=True),))) == {}
    with pytest.raises(ManifestError, match=r"gone\[k\] not found"):
        environment(Container("c", "i", env=(EnvVar("A", config_map_key=ConfigMapKeyRef("gone", "k")),)))


def test_command_and_args_expanded_from_the_environment() -> None:
    container = Container("c", "i", command=("run", "$(A)"), args=("--root", "/host$(B)", "$(NONE)"))
    assert command_line(container, ENV) == (["run", "1"], ["--root", "/hosttwo", "$(NONE)"])
