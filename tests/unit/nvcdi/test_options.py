from cdictk.nvcdi.options import kind_problem


def test_a_good_kind_has_no_problem() -> None:
    assert kind_problem("nvidia.com", "gpu") is None
    assert kind_problem("k8s.gpu.example.com", "mig-1g.10gb") is None


def test_the_libraries_rules_and_the_specifications_limits_name_the_part() -> None:
    assert kind_problem("", "gpu") == ("vendor", "empty vendor")
    assert kind_problem("nvidia.com", "gpu=") == (
        "class",
        'invalid class "gpu=": must end with a letter or digit',
    )
    # The library accepts "_" in a vendor; the CDI specification does not, and cdictk writes to it.
    assert kind_problem("my_vendor.com", "gpu") == (
        "vendor",
        'invalid vendor "my_vendor.com": the CDI specification wants a DNS subdomain, without "_"',
    )
    assert kind_problem("nvidia.com", "g" * 64) == (
        "class",
        "invalid class: 64 characters, over the CDI specification's limit of 63",
    )
