"""cdi.k8s.io/ annotations, both ways, as the reference library has them (cdi.md §4.4)."""

from __future__ import annotations

import pytest

from cdictk.startpath.specs.annotations import devices_from_annotations


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
