from cdictk.nvcdi.options import SpecOptions
from cdictk.startpath.specs.names import kind_problem


def test_the_default_kind_is_one_a_spec_may_be_written_for() -> None:
    options = SpecOptions()
    assert (options.vendor, options.cls) == ("nvidia.com", "gpu")
    assert kind_problem(f"{options.vendor}/{options.cls}", spec_limits=True) is None
