"""cdi.k8s.io annotations written as the CDI reference library writes them, and read back."""

from __future__ import annotations

import pytest

from cdictk.cdi.annotate import annotation_key, annotation_value, update_annotations
from cdictk.startpath.specs.annotations import devices_from_annotations


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
