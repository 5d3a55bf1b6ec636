"""cdi.k8s.io/ annotations, both ways, as the reference library has them (cdi.md §4.4)."""

from __future__ import annotations

import pytest

from cdictk.startpath.specs.annotations import (
    annotation_key,
    annotation_value,
    devices_from_annotations,
    update_annotations,
)


def test_devices_in_sorted_key_order_and_only_under_the_prefix() -> None:
    annotations = {
        "cdi.k8s.io/b": "vendor.com/gpu=1",
        "cdi.k8s.io/a": "vendor.com/gpu=0,vendor.com/net=eth0",
        "other.example/x": "not even a name",
    }
    assert devices_from_annotations(annotations) == [
        "vendor.com/gpu=0",
        "vendor.com/net=eth0",
        "vendor.com/gpu=1",
    ]
    assert devices_from_annotations({"other.example/x": "y"}) is None
    assert devices_from_annotations({"cdi.k8s.io/a": "v.com/c=d"}, ()) is None  # no prefix: nothing read


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", 'annotation "cdi.k8s.io/k": "": not a qualified CDI device name (want vendor.com/class=name)'),
        (
            "vendor.com/gpu=0, vendor.com/gpu=1",  # no trimming, as in the library
            'annotation "cdi.k8s.io/k": " vendor.com/gpu=1": invalid vendor " vendor.com": must start with a letter',
        ),
        (
            "foobar",
            'annotation "cdi.k8s.io/k": "foobar": not a qualified CDI device name (want vendor.com/class=name)',
        ),
    ],
)
def test_a_value_that_is_not_a_list_of_names_is_refused(value: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        devices_from_annotations({"cdi.k8s.io/k": value})
    assert str(caught.value) == message


def test_an_annotation_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ValueError, match=r'^annotations\["cdi.k8s.io/k"\]: not a string$'):
        devices_from_annotations({"cdi.k8s.io/k": 1})


def test_keys_as_the_library_makes_them() -> None:
    assert annotation_key("vendor.gpu", "claim/uid-1") == "cdi.k8s.io/vendor.gpu_claim_uid-1"
    for plugin, device_id, message in (
        ("", "x", "empty plugin name"),
        ("p", "", "empty device id"),
        ("_vendor.class", "x", "must start and end with a letter or digit"),
        ("p", "device_", "must start and end with a letter or digit"),
        ("ven.dor-cl+ass", "x", 'only letters, digits, "_", "." and "-" are allowed'),
        ("p" * 60, "xyz", "over 63 characters"),
    ):
        with pytest.raises(ValueError, match=message):
            annotation_key(plugin, device_id)


def test_update_adds_one_key_and_never_changes_its_input() -> None:
    original = {"x": "y"}
    updated = update_annotations(original, "vendor.gpu", "0", ["vendor.com/gpu=0", "vendor.com/gpu=1"])
    assert updated == {"x": "y", "cdi.k8s.io/vendor.gpu_0": "vendor.com/gpu=0,vendor.com/gpu=1"}
    assert original == {"x": "y"}
    assert devices_from_annotations(updated) == ["vendor.com/gpu=0", "vendor.com/gpu=1"]
    with pytest.raises(ValueError, match="is used already"):
        update_annotations(updated, "vendor.gpu", "0", ["vendor.com/gpu=2"])
    with pytest.raises(ValueError, match='"/dev/null": not a qualified CDI device name'):
        annotation_value(["vendor.com/gpu=0", "/dev/null"])
    assert annotation_value([]) == ""
