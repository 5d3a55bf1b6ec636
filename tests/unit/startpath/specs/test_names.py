import pytest

from cdictk.startpath.specs.names import (
    QualifiedName,
    device_name_problem,
    kind_problem,
    parse_qualified_name,
    split_kind,
    vendor_or_class_problem,
)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("vendor.com/class=dev", ("vendor.com", "class", "dev")),
        ("a/b=c", ("a", "b", "c")),
        ("vendor.com/class=0", ("vendor.com", "class", "0")),
        ("vendor1.com/class.subclass=dev1", ("vendor1.com", "class.subclass", "dev1")),
        ("other-vendor1.com/class_1=dev_1", ("other-vendor1.com", "class_1", "dev_1")),
        ("yet_another-vendor2.com/c-lass_2=dev_1:2.3", ("yet_another-vendor2.com", "c-lass_2", "dev_1:2.3")),
        (
            "nvidia.com/gpu=GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
            ("nvidia.com", "gpu", "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c"),
        ),
    ],
)
def test_valid_qualified_names(text: str, parts: tuple[str, str, str]) -> None:
    name = parse_qualified_name(text)
    assert name == QualifiedName(*parts)
    assert str(name) == text
    assert name.kind == f"{parts[0]}/{parts[1]}"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("_invalid.com/class=dev", "invalid vendor"),
        ("invalid2.com-/class=dev", "invalid vendor"),
        ("invalid3.com/_class=dev", "invalid class"),
        ("invalid4.com/class_=dev", "invalid class"),
        ("invalid5.com/class=-dev", "invalid device name"),
        ("invalid6.com/class=dev:", "invalid device name"),
        ("*.com/*dev=*gpu*", "invalid vendor"),
        ("vendor.com/a/b=dev", "invalid class"),
        ("vendor.com/class=a dev ice", "invalid device name"),
        ("nvidia.com/gpu", "not a qualified CDI device name"),
        ("gpu=0", "not a qualified CDI device name"),
        ("/dev/nvidia0", "not a qualified CDI device name"),
        ("nvidia.com/gpu=", "not a qualified CDI device name"),
        ("", "not a qualified CDI device name"),
    ],
)
def test_invalid_qualified_names(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_qualified_name(text)


def test_vendor_and_class_messages() -> None:
    assert vendor_or_class_problem("vendor", "") == "empty vendor"
    assert (
        vendor_or_class_problem("vendor", "1vendor.com")
        == 'invalid vendor "1vendor.com": must start with a letter'
    )
    assert vendor_or_class_problem("class", "gpu-") == 'invalid class "gpu-": must end with a letter or digit'
    assert (
        vendor_or_class_problem("class", "g+u")
        == 'invalid class "g+u": only letters, digits, "_", "." and "-" are allowed'
    )
    assert vendor_or_class_problem("vendor", "a") is None
    assert vendor_or_class_problem("vendor", "A" * 300) is None  # no length limit


def test_device_name_messages() -> None:
    assert device_name_problem("") == "empty device name"
    assert device_name_problem("0") is None
    assert device_name_problem("mig0:1") is None
    assert device_name_problem("-x") == 'invalid device name "-x": must start with a letter or digit'
    assert device_name_problem("x.") == 'invalid device name "x.": must end with a letter or digit'
    assert (
        device_name_problem("a b")
        == 'invalid device name "a b": only letters, digits, "_", ".", ":" and "-" are allowed'
    )
    assert device_name_problem("é") is not None


def test_kinds() -> None:
    assert split_kind("nvidia.com/gpu") == ("nvidia.com", "gpu")
    assert split_kind("vendor.com/a/b") == ("vendor.com", "a/b")
    assert split_kind("vendor.comdevice") == ("", "vendor.comdevice")
    assert kind_problem("nvidia.com/gpu") is None
    assert (
        kind_problem("vendor.comdevice")
        == 'invalid kind "vendor.comdevice": want vendor/class, for example nvidia.com/gpu'
    )
    assert kind_problem("vendor.com/device=") == 'invalid class "device=": must end with a letter or digit'
    assert (
        kind_problem("vendor.com/de=vice")
        == 'invalid class "de=vice": only letters, digits, "_", "." and "-" are allowed'
    )
    assert (
        kind_problem("vendor.com-/device") == 'invalid vendor "vendor.com-": must end with a letter or digit'
    )


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("nvidia.com/gpu", None),
        ("v" * 253 + "/" + "c" * 63, None),
        ("vendor.com/class_1", None),
        (
            "yet_another-vendor2.com/gpu",
            'invalid vendor "yet_another-vendor2.com": the CDI specification wants a DNS subdomain, without "_"',
        ),
        ("v" * 254 + "/gpu", "invalid vendor: 254 characters, over the CDI specification's limit of 253"),
        ("vendor.com/" + "c" * 64, "invalid class: 64 characters, over the CDI specification's limit of 63"),
    ],
)
def test_the_specifications_limits_are_stricter_than_the_library(kind: str, problem: str | None) -> None:
    assert kind_problem(kind) is None  # the reference library, and so runtimes, accept every one
    assert kind_problem(kind, spec_limits=True) == problem


def test_the_specifications_limits_come_after_the_librarys_rules() -> None:
    assert kind_problem("_vendor.com/gpu", spec_limits=True) == (
        'invalid vendor "_vendor.com": must start with a letter'
    )
    assert kind_problem("gpu", spec_limits=True) == kind_problem("gpu")
