"""cdictk cdi validate's findings for one file: the warnings about what runtimes read differently."""

from pathlib import Path

import pytest

from cdictk.cdi.validate import validate_file

HEAD = "cdiVersion: 0.3.0\nkind: vendor.com/gpu\n"
DEVICE = "devices:\n- name: a\n  containerEdits:\n    env: [A=1]\n"


def check(tmp_path: Path, text: str, name: str = "spec.yaml") -> tuple[list[str], list[str]]:
    path = tmp_path / name
    path.write_text(text)
    report = validate_file(str(path))
    strip = f"{path}: "
    return [str(p).removeprefix(strip) for p in report.problems], [
        str(p).removeprefix(strip) for p in report.warnings
    ]


def test_a_clean_spec_has_no_warning(tmp_path: Path) -> None:
    assert check(tmp_path, HEAD + DEVICE) == ([], [])


@pytest.mark.parametrize("rest", ["---\nb: 1\n", "---\nfoo: [\n", "...\n%%\n"])
def test_more_than_one_document(tmp_path: Path, rest: str) -> None:
    problems, warnings = check(tmp_path, HEAD + DEVICE + rest)
    assert problems == []
    assert warnings == ["more than one YAML document: runtimes and cdictk read the first one only"]


def test_null_items(tmp_path: Path) -> None:
    text = (
        "cdiVersion: 0.7.0\nkind: vendor.com/gpu\nannotations: {k: null}\ndevices:\n- name: a\n"
        "  containerEdits:\n    hooks: [{hookName: prestart, path: /h, args: [h, null]}]\n"
        "    additionalGids: [null]\n    env: [A=1, null]\n"
    )
    problems, warnings = check(tmp_path, text)
    assert problems == ['devices[0].containerEdits.env[1]: invalid environment variable "" (want NAME=VALUE)']
    assert warnings == [
        "annotations.k: null item(s) (annotations.k, devices[0].containerEdits.hooks[0].args[1], "
        'devices[0].containerEdits.additionalGids[0] and 1 more): runtimes and cdictk read them as "" or 0'
    ]


def test_a_null_node_is_an_error_not_a_warning(tmp_path: Path) -> None:
    problems, warnings = check(
        tmp_path, HEAD + "devices:\n- name: a\n  containerEdits:\n    deviceNodes: [null]\n"
    )
    assert problems[0] == "devices[0].containerEdits.deviceNodes[0]: expected a mapping, got null"
    assert warnings == []


@pytest.mark.parametrize("kind", ["a/gpu", "vendor.com/g"])
def test_a_one_character_vendor_or_class(tmp_path: Path, kind: str) -> None:
    problems, warnings = check(tmp_path, f"cdiVersion: 0.3.0\nkind: {kind}\n" + DEVICE)
    assert problems == []
    assert warnings == [
        "kind: a one-character vendor or class: the CDI reference library (v1.1.0) panics on it while it "
        "loads the spec dirs, so a runtime built on it crashes or gets no CDI device at all"
    ]


def test_a_version_check_the_reference_library_misses(tmp_path: Path) -> None:
    host_path = "- name: b\n  containerEdits:\n    deviceNodes: [{path: /dev/x, hostPath: /dev/null}]\n"
    last = "- name: c\n  containerEdits:\n    env: [C=1]\n"
    problems, warnings = check(tmp_path, HEAD + DEVICE + host_path + last)
    assert problems == ["cdiVersion: version 0.3.0 is too old: the spec's content needs at least 0.5.0"]
    assert warnings == [
        "cdiVersion: runtimes accept this spec at 0.3.0 (the CDI reference library looks for host paths and "
        "mount types in the last device only) and expose its devices; cdictk does not"
    ]
    # With the host path in the last device, runtimes refuse the spec too: nothing to warn about.
    problems, warnings = check(tmp_path, HEAD + DEVICE + last + host_path)
    assert (len(problems), warnings) == (1, [])
