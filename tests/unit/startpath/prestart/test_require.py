"""NVIDIA_REQUIRE_* requirements: which apply to a container, how they read, and when they hold."""

from __future__ import annotations

import pytest

from cdictk.startpath.prestart.require import (
    Facts,
    GpuFacts,
    RequirementError,
    check,
    needed_keys,
    requirements,
)
from tests import REPO as CLONE

REPO = str(CLONE)


def _branches(*branches: str) -> str:
    """The forward-compatibility groups NVIDIA's CUDA images list for each driver branch."""
    brands = [
        "tesla",
        "unknown",
        "nvidia",
        "nvidiartx",
        "geforce",
        "geforcertx",
        "quadro",
        "quadrortx",
        "titan",
        "titanrtx",
    ]
    return " ".join(
        f"brand={brand},driver>={branch},driver<{int(branch) + 1}" for branch in branches for brand in brands
    )


# NVIDIA_REQUIRE_CUDA of nvidia/cuda images (gitlab.com/nvidia/container-images/cuda, dist/*/base/Dockerfile).
CUDA_10_2 = (
    "cuda>=10.2 brand=tesla,driver>=396,driver<397 brand=tesla,driver>=410,driver<411 "
    "brand=tesla,driver>=418,driver<419 brand=tesla,driver>=440,driver<441"
)
CUDA_11_0 = "cuda>=11.0 brand=tesla,driver>=418,driver<419 brand=tesla,driver>=440,driver<441"
CUDA_11_8 = "cuda>=11.8 brand=tesla,driver>=450,driver<451 " + _branches("470", "510", "515")
CUDA_12_4 = "cuda>=12.4 " + _branches("470", "525", "535")
H100 = GpuFacts("9.0", "nvidia", 0)


def facts(cuda: str = "12.4", driver: str = "550.54.15", *gpus: GpuFacts) -> Facts:
    return Facts(cuda, driver, gpus)


def unmet(reqs: list[str], of: Facts) -> str:
    with pytest.raises(RequirementError) as info:
        check(reqs, of)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---- which requirements apply ------------------------------------------------------------------------


def test_every_nvidia_require_variable_applies_in_name_order() -> None:
    env = {
        "PATH": "/bin",
        "NVIDIA_REQUIRE_CUDA": CUDA_12_4,
        "NVIDIA_REQUIRE_ARCH": "arch>=8.0",
        "NVIDIA_REQUIRE_": "driver>=500",  # the bare prefix counts, as for NVIDIA
        "NVIDIA_REQUIREMENTS": "driver>=1",  # not the prefix: "NVIDIA_REQUIRE_" needs the underscore
        "CUDA_VERSION": "12.4.1",  # NVIDIA_REQUIRE_CUDA is set: not a legacy image
    }
    assert requirements(env) == ["driver>=500", "arch>=8.0", CUDA_12_4]


def test_jetpack_variables_are_mount_options_not_requirements() -> None:
    env = {
        "NVIDIA_REQUIRE_JETPACK": "csv-mounts=all",
        "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS": "anything at all",  # a prefix match, as in cuda_image.go
        "NVIDIA_REQUIRE_L4T": "driver>=1",
    }
    assert requirements(env) == ["driver>=1"]


def test_no_requirements() -> None:
    assert requirements({}) == []
    assert requirements({"NVIDIA_VISIBLE_DEVICES": "all", "PATH": "/bin"}) == []
    # Empty (or all-space) values require nothing and are left out.
    assert requirements({"NVIDIA_REQUIRE_CUDA": "", "NVIDIA_REQUIRE_X": "   "}) == []


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True"])
def test_disable_require_skips_everything(value: str) -> None:
    env = {
        "NVIDIA_DISABLE_REQUIRE": value,
        "NVIDIA_REQUIRE_CUDA": "cuda>=99.0",
        "NVIDIA_REQUIRE_BAD": "this is not read at all",
        "CUDA_VERSION": "not a version either",
    }
    assert requirements(env) == []


@pytest.mark.parametrize(
    "value", ["0", "f", "F", "FALSE", "false", "False", "", "yes", "on", " true", "tRUE", "2"]
)
def test_disable_require_other_values_leave_the_checks_on(value: str) -> None:
    # Go's strconv.ParseBool: the false values, and anything it cannot parse (NVIDIA ignores the error).
    assert requirements({"NVIDIA_DISABLE_REQUIRE": value, "NVIDIA_REQUIRE_CUDA": "cuda>=12.0"}) == [
        "cuda>=12.0"
    ]


@pytest.mark.parametrize(
    ("cuda_version", "implied"),
    [
        ("10.0.130", "cuda>=10.0"),
        ("9.0.176", "cuda>=9.0"),
        ("12.4.1", "cuda>=12.4"),
        ("11.0", "cuda>=11.0"),
        ("12", "cuda>=12.0"),
        ("11.08.0", "cuda>=11.8"),  # numbers, as semver reads them
    ],
)
def test_legacy_image_requires_its_cuda_version(cuda_version: str, implied: str) -> None:
    assert requirements({"CUDA_VERSION": cuda_version}) == [implied]
    # NVIDIA_REQUIRE_CUDA set but empty is still a legacy image (cuda_image.go tests its length).
    assert requirements({"CUDA_VERSION": cuda_version, "NVIDIA_REQUIRE_CUDA": ""}) == [implied]
    # Other requirements come first, the implied one last.
    assert requirements({"CUDA_VERSION": cuda_version, "NVIDIA_REQUIRE_X": "driver>=1"}) == [
        "driver>=1",
        implied,
    ]


def test_not_a_legacy_image() -> None:
    assert requirements({"CUDA_VERSION": "", "NVIDIA_REQUIRE_X": "arch>=7.0"}) == ["arch>=7.0"]
    assert requirements({"CUDA_VERSION": "11.8.0", "NVIDIA_REQUIRE_CUDA": "cuda>=11.8"}) == ["cuda>=11.8"]
    # Set to spaces only: not legacy (its length is not 0), and requires nothing.
    assert requirements({"CUDA_VERSION": "11.8.0", "NVIDIA_REQUIRE_CUDA": " "}) == []


@pytest.mark.parametrize(
    "cuda_version", ["1" * 5000, "v12.4", "12.4.1.2", "12.4.1-rc1", "12.x", ".12", "12.", "1 2", "١٢.٤"]
)
def test_legacy_cuda_version_that_is_not_a_version(cuda_version: str) -> None:
    with pytest.raises(RequirementError, match=r"^CUDA_VERSION: \".*\" is not a version"):
        requirements({"CUDA_VERSION": cuda_version})


def test_real_cuda_image_requirements_read() -> None:
    for value in (CUDA_10_2, CUDA_11_0, CUDA_11_8, CUDA_12_4):
        assert requirements({"NVIDIA_REQUIRE_CUDA": value, "CUDA_VERSION": "1.0"}) == [value]
    assert needed_keys([CUDA_12_4]) == {"cuda", "brand", "driver"}
    assert needed_keys([CUDA_11_0, "arch>=7.0"]) == {"cuda", "brand", "driver", "arch"}
    assert needed_keys(["cuda>=12.0"]) == {"cuda"}
    assert needed_keys([]) == set()
    assert needed_keys(["CUDA>=12.0 Brand=Tesla"]) == {"cuda", "brand"}


# ---- malformed requirements --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("cuda>>1", 'bad constraint "cuda>>1": unknown operator ">>"'),
        ("cuda==12.0", 'bad constraint "cuda==12.0": unknown operator "=="'),  # NVIDIA rejects it too
        ("cuda=>12.0", 'unknown operator "=>"'),
        ("cuda<>12.0", 'unknown operator "<>"'),
        ("cuda!12.0", 'unknown operator "!"'),  # NVIDIA's prefix match reads it as !=
        ("cuda>=!12.0", 'unknown operator ">=!"'),
        ("cuda12.0", 'bad constraint "cuda12.0": no operator'),
        ("cuda", "no operator"),
        (">=12.0", 'bad constraint ">=12.0": no key before the operator'),
        ("=tesla", "no key before the operator"),
        ("cuda>=", 'bad constraint "cuda>=": no value after the operator'),
        ("foo>=1.0", 'bad constraint "foo>=1.0": unknown key "foo" (want cuda, driver, arch or brand)'),
        ("cudaa>=1", 'unknown key "cudaa"'),
        ("cuda>=12.x", '"12.x" is not a version'),
        ("cuda>=12.", '"12." is not a version'),
        ("cuda>=.12", '".12" is not a version'),
        ("cuda>=12..4", '"12..4" is not a version'),
        ("driver>=-1", '"-1" is not a version'),
        ("driver>=470a", '"470a" is not a version'),
        ("arch>=sm_90", '"sm_90" is not a version'),
        ("driver>=1" + "0" * 18, "is not a version"),  # too many digits for NVIDIA's 64 bits
        ("driver>=" + "9" * 5000, "is not a version"),  # past Python's int() limit too
        ("cuda>=١٢", "is not a version"),  # Arabic-Indic digits are digits to str.isdigit
        ("brand>tesla", "a brand can only be compared with = or !="),
        ("brand<=tesla", "a brand can only be compared with = or !="),
        ("brand=tes.la", '"tes.la" is not a brand name'),
        ("brand=tes=la", '"tes=la" is not a brand name'),
        ("cuda>=12.0,", 'bad constraint "cuda>=12.0,": empty constraint (a stray comma)'),
        (",cuda>=12.0", "empty constraint"),
        ("cuda>=12.0,,driver>=1", "empty constraint"),
        ("cuda>=12.0 ,", "empty constraint"),
        ("cuda>=12.0\tbrand=tesla", r'"12.0\x09brand=tesla" is not a version'),  # only spaces separate
        ("cuda>=12.0\n", r'"12.0\x0a" is not a version'),
        ("brand=tesla\n", r'"tesla\x0a" is not a brand name'),
        ("\tcuda>=12.0", r'unknown key "\x09cuda"'),
    ],
)
def test_malformed_requirement(value: str, message: str) -> None:
    env = {"NVIDIA_REQUIRE_CUDA": f"cuda>=11.0 {value}", "CUDA_VERSION": "11.0"}
    with pytest.raises(RequirementError) as info:
        requirements(env)
    assert str(info.value).startswith("NVIDIA_REQUIRE_CUDA: bad constraint ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_malformed_constraint_is_an_error_even_where_nvidia_would_not_reach_it() -> None:
    # libnvidia-container stops at the first group that holds and never reads the rest.
    with pytest.raises(RequirementError, match=r'^NVIDIA_REQUIRE_CUDA: bad constraint "foo=bar"'):
        requirements({"NVIDIA_REQUIRE_CUDA": "cuda>=1.0 foo=bar"})
    with pytest.raises(RequirementError, match="unknown key"):
        check(["cuda>=1.0 foo=bar"], facts())
    with pytest.raises(RequirementError, match="unknown key"):
        needed_keys(["cuda>=1.0 foo=bar"])


def test_malformed_requirement_given_straight_to_check_names_it() -> None:
    with pytest.raises(RequirementError) as info:
        check(["cuda>=11.0 driver>>1"], facts())
    assert str(info.value) == (
        'requirement "cuda>=11.0 driver>>1": bad constraint "driver>>1": '
        'unknown operator ">>" (want one of = != < <= > >=)'
    )


def test_a_long_malformed_value_is_cut_in_the_message() -> None:
    with pytest.raises(RequirementError) as info:
        requirements({"NVIDIA_REQUIRE_X": "brand=" + "x" * 300 + "!"})
    assert len(str(info.value)) < 600 and '..."' in str(info.value)


# ---- evaluation --------------------------------------------------------------------------------------


def test_real_cuda_images_on_drivers_new_enough() -> None:
    for req in (CUDA_10_2, CUDA_11_0, CUDA_11_8, CUDA_12_4):
        check([req], facts("12.4", "550.54.15", H100))
        check([req], facts("13.0", "580.95.05", H100, GpuFacts("8.0", "tesla", 1)))


def test_real_cuda_image_on_an_older_driver_with_forward_compatibility() -> None:
    # CUDA 12.4 needs a 550 driver, but the cuda-compat package covers datacenter 470, 525 and 535 drivers.
    check([CUDA_12_4], facts("12.2", "535.104.05", H100))
    check([CUDA_12_4], facts("11.4", "470.57.02", GpuFacts("8.0", "tesla", 0)))
    check([CUDA_12_4], facts("12.0", "525.60.13", GpuFacts("8.6", "geforcertx", 2)))
    check([CUDA_11_0], facts("10.1", "418.87.01", GpuFacts("7.0", "tesla", 0)))


def test_real_cuda_image_on_an_old_driver_it_does_not_cover() -> None:
    message = unmet([CUDA_12_4], facts("12.3", "545.23.08", H100))
    assert message == (
        "requirement not met: cuda>=12.4 (the driver supports CUDA 12.3), nor any of its 30 other "
        "alternatives (the driver is 545.23.08; the brand of /dev/nvidia0 is nvidia): "
        "update the driver, or use an image built for an older CUDA"
    )
    # 11.0 covers 418 and 440 on Tesla only.
    message = unmet([CUDA_11_0], facts("10.2", "440.33.01", GpuFacts("7.5", "geforce", 1)))
    assert message.startswith(
        "requirement not met: cuda>=11.0 (the driver supports CUDA 10.2), nor any of its 2"
    )
    assert "the brand of /dev/nvidia1 is geforce" in message


def test_groups_are_alternatives_and_commas_join() -> None:
    req = "cuda>=12.0,driver>=525 cuda>=11.0,driver>=450,driver<451"
    check([req], facts("12.0", "525.60.13"))
    check([req], facts("11.0", "450.80.02"))
    unmet([req], facts("12.0", "520.1"))  # first group: driver too old; second: driver too new
    unmet([req], facts("11.0", "451.1"))


def test_separate_requirements_must_all_hold() -> None:
    check(["cuda>=12.0", "driver>=500", "arch>=9.0"], facts("12.4", "550.54.15", H100))
    message = unmet(["cuda>=12.0", "driver>=560", "arch>=9.0"], facts("12.4", "550.54.15", H100))
    assert message == "requirement not met: driver>=560 (the driver is 550.54.15)"
    message = unmet(["cuda>=12.0", "driver>=500", "arch>=10.0"], facts("12.4", "550.54.15", H100))
    assert message == "requirement not met: arch>=10.0 (the compute capability of /dev/nvidia0 is 9.0)"


def test_whole_env_through_check() -> None:
    env = {"NVIDIA_REQUIRE_CUDA": CUDA_11_8, "NVIDIA_REQUIRE_ARCH": "arch>=7.0", "CUDA_VERSION": "11.8.0"}
    reqs = requirements(env)
    check(reqs, facts("12.4", "550.54.15", H100, GpuFacts("7.0", "tesla", 1)))
    message = unmet(reqs, facts("12.4", "550.54.15", H100, GpuFacts("6.1", "geforce", 1)))
    assert message == "requirement not met: arch>=7.0 (the compute capability of /dev/nvidia1 is 6.1)"


@pytest.mark.parametrize(
    ("actual", "constraint", "holds"),
    [
        ("470.57.02", "driver>=470", True),
        ("470.57.02", "driver<471", True),
        ("470.57.02", "driver>470", True),  # 470.57.02 is after 470(.0.0)
        ("470", "driver>=470.57.02", False),
        ("470", "driver=470.0.0", True),
        ("470.0", "driver=470", True),
        ("470.0", "driver!=470", False),
        ("535.104.05", "driver<535.129.03", True),  # 104 < 129 as numbers
        ("535.104.05", "driver>=535.54.03", True),  # 104 > 54 as numbers, not as text
        ("535.104.05", "driver=535.104.5", True),  # 05 is 5
        ("535.104.05", "driver<=535.104.05", True),
        ("535.104.05", "driver<535.104.05", False),
        ("12.10", "cuda>12.9", True),
        ("12.9", "cuda>=12.10", False),
        ("12.4", "cuda>=12.4", True),
        ("12.4", "cuda>=12.4.1", False),
        ("12.4", "cuda=12.4.0", True),
        ("13.0", "cuda>=12.9", True),
        ("13.0", "cuda<13", False),
        ("13.0", "cuda=13", True),
        ("13.0", "cuda!=13.1", True),
        ("9.0", "arch>=8.0", True),
        ("9.0", "arch>9", False),
        ("8.6", "arch<8.9", True),
        ("10.0", "arch>=9.0", True),
        ("10.0", "arch<9.10", False),
    ],
)
def test_versions_compare_number_by_number(actual: str, constraint: str, holds: bool) -> None:
    key = next(key for key in ("cuda", "driver", "arch") if constraint.startswith(key))
    if key == "cuda":
        of = facts(actual, "550.54.15", H100)
    elif key == "driver":
        of = facts("12.4", actual, H100)
    else:
        of = facts("12.4", "550.54.15", GpuFacts(actual, "nvidia", 0))
    if holds:
        check([constraint], of)
    else:
        unmet([constraint], of)


@pytest.mark.parametrize(
    ("brand", "constraint", "holds"),
    [
        ("tesla", "brand=tesla", True),
        ("tesla", "brand=TESLA", True),  # names compare without regard to case, as for NVIDIA
        ("Tesla", "brand=tesla", True),
        ("tesla", "brand!=tesla", False),
        ("nvidia", "brand!=tesla", True),
        ("nvidia", "brand=nvidiartx", False),
        ("unknown", "brand=unknown", True),
        ("geforcertx", "brand=geforce", False),
    ],
)
def test_brands_compare_without_case(brand: str, constraint: str, holds: bool) -> None:
    of = facts("12.4", "550.54.15", GpuFacts("9.0", brand, 0))
    if holds:
        check([constraint], of)
    else:
        unmet([constraint], of)


def test_keys_are_read_without_regard_to_case() -> None:
    check(["CUDA>=12.0 Brand=Tesla"], facts("12.4", "1", H100))
    unmet(["Driver>=600"], facts("12.4", "550.54.15", H100))


def test_every_gpu_must_meet_each_requirement_on_its_own() -> None:
    tesla, geforce = GpuFacts("7.0", "tesla", 0), GpuFacts("8.6", "geforce", 1)
    check(["arch>=7.0"], facts("12.4", "550.54.15", tesla, geforce))
    message = unmet(["arch>=8.0"], facts("12.4", "550.54.15", tesla, geforce))
    assert message == "requirement not met: arch>=8.0 (the compute capability of /dev/nvidia0 is 7.0)"
    # Each GPU may meet a different alternative: the requirement is checked once per GPU.
    check(["brand=tesla,arch>=7.0 brand=geforce,arch>=8.6"], facts("12.4", "1", tesla, geforce))
    message = unmet(["brand=tesla brand=nvidia"], facts("12.4", "1", tesla, geforce))
    assert message == (
        "requirement not met: brand=tesla (the brand of /dev/nvidia1 is geforce), "
        "nor any of its 1 other alternative"
    )


def test_without_a_gpu_arch_and_brand_constraints_hold() -> None:
    # NVIDIA_VISIBLE_DEVICES=none: the driver only; libnvidia-container checks once, without a device.
    check(["arch>=99.0", "brand=quadro", "cuda>=12.0,brand=tesla"], facts("12.4", "550.54.15"))
    message = unmet(["brand=tesla,cuda>=13.0"], facts("12.4", "550.54.15"))
    assert message.startswith("requirement not met: brand=tesla,cuda>=13.0 (the driver supports CUDA 12.4)")


def test_gpu_without_a_minor_is_described_plainly() -> None:
    message = unmet(["arch>=9.0"], facts("12.4", "1", GpuFacts("8.0", "tesla")))
    assert message == "requirement not met: arch>=9.0 (the compute capability of the GPU is 8.0)"


def test_empty_requirements_hold() -> None:
    check([], facts())
    check(["", "   "], facts())


def test_a_fact_that_was_not_read_is_an_error_not_a_pass() -> None:
    with pytest.raises(
        RequirementError, match=r"^cannot check cuda: the CUDA version of the driver is not known$"
    ):
        check(["cuda>=12.0"], Facts(driver="550.54.15"))
    with pytest.raises(RequirementError, match="the brand of /dev/nvidia0 is not known"):
        check(["brand=tesla"], Facts("12.4", "550.54.15", [GpuFacts(arch="9.0", minor=0)]))
    with pytest.raises(
        RequirementError, match=r'^cannot check driver>=1: the driver version "r550" is not a version$'
    ):
        check(["driver>=1"], Facts("12.4", "r550"))


def test_the_summary_leaves_out_facts_that_were_not_read() -> None:
    message = unmet(["cuda>=13.0 driver>=600"], Facts(cuda="12.4", driver="550.54.15"))
    assert message == (
        "requirement not met: cuda>=13.0 (the driver supports CUDA 12.4), nor any of its 1 other alternative "
        "(the driver is 550.54.15): update the driver, or use an image built for an older CUDA"
    )
    message = unmet(["driver>=600 cuda>=13.0,brand=tesla"], Facts(cuda="12.4", driver="550.54.15"))
    assert message == (
        "requirement not met: driver>=600 (the driver is 550.54.15), nor any of its 1 other alternative "
        "(the driver supports CUDA 12.4)"
    )


def test_facts_compare_and_print() -> None:
    assert Facts("12.4", "550.54.15", [H100]) == Facts("12.4", "550.54.15", [GpuFacts("9.0", "nvidia", 0)])
    assert Facts("12.4") != Facts("12.3")
    assert repr(Facts("12.4", gpus=[H100])) == (
        "Facts(cuda='12.4', driver='', gpus=[GpuFacts(arch='9.0', brand='nvidia', minor=0)])"
    )
    with pytest.raises(AttributeError):
        Facts().extra = 1  # type: ignore[attr-defined]


def test_the_image_cannot_make_the_hook_parse_without_end() -> None:
    """An image sets these; a root hook reads them before the container starts: their size is bounded."""
    real = " ".join(["brand=tesla,driver>=470,driver<471"] * 60)  # longer than any CUDA image's
    assert requirements({"NVIDIA_REQUIRE_CUDA": f"cuda>=12.4 {real}"})
    with pytest.raises(RequirementError, match=r"^NVIDIA_REQUIRE_CUDA: longer than 16384 characters$"):
        requirements({"NVIDIA_REQUIRE_CUDA": "cuda>=1.0 " * 2000})
    many = {f"NVIDIA_REQUIRE_{i}": "cuda>=1.0" for i in range(65)}
    with pytest.raises(RequirementError, match=r"^more than 64 NVIDIA_REQUIRE_\* variables$"):
        requirements(many)
    assert len(requirements(dict(list(many.items())[:64]))) == 64
