"""cdictk.cdi.yamlemit against PyYAML: the same bytes, or no answer (and then PyYAML writes it).

Every document is compared with what dump.emit_with_pyyaml makes of it through libyaml's emitter (what
dump_yaml used alone before), and, where ours answers, through PyYAML's Python emitter too, which is
the one dump.py falls back to without libyaml.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import cdictk.cdi.dump
from cdictk.cdi.decode import decode_spec
from cdictk.cdi.dump import dump_yaml, emit_with_pyyaml, to_data
from cdictk.cdi.model import Spec
from cdictk.cdi.parse import parse_document
from cdictk.cdi.yamlemit import _MAY_BE_RETYPED, _RETYPED_WORDS, _settle_number, emit, needs_double_quotes
from cdictk.cdi.yamlscalar import is_ambiguous
from cdictk.node.modes import Mode
from cdictk.node.roots import Roots
from cdictk.nvcdi.nodespec import node_spec
from cdictk.nvcdi.options import SpecOptions
from tests import REPO
from tests.conftest import require_node_tools
from tests.fakenode.node import PRESETS, build_node
from tests.fakenode.platforms import PLATFORMS, build_platform
from tests.unit.cdi.test_yamlscalar import resolver_probes

PRINTABLE = "".join(map(chr, range(0x20, 0x7F)))


def python_emitter_text(data: dict[str, Any]) -> str:
    """What dump.py writes where PyYAML has no libyaml: its Python emitter."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delattr(yaml, "CSafeDumper")
        return emit_with_pyyaml(data)


def pyyaml_retypes(text: str) -> bool:
    resolvers = yaml.resolver.Resolver.yaml_implicit_resolvers
    return any(pattern.match(text) for _tag, pattern in resolvers.get(text[0], ()))


# --- specs generated on the fake nodes -----------------------------------------------------------------


@pytest.fixture(scope="module", params=[*PRESETS, *PLATFORMS])
def generated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, stub_cache: str
) -> Spec:
    """The spec ``cdictk cdi generate`` writes for a fake node preset or a platform node (its mode)."""
    require_node_tools()
    name: str = request.param
    root = str(tmp_path_factory.mktemp(f"yamlemit-{name}") / "node")
    if name in PRESETS:
        node = build_node(root, name, stub_cache)
        roots, mode = Roots.from_options(node.root, None, node.proc, node.sys), Mode.AUTO
    else:
        platform = build_platform(root, name, stub_cache)
        roots, mode = (
            Roots.from_options(platform.root, None, platform.proc, platform.sys),
            Mode(platform.mode),
        )
    return node_spec(roots, mode, SpecOptions()).spec


def test_a_generated_spec_takes_the_fast_path_byte_for_byte(
    generated: Spec, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = to_data(generated)
    text = emit(data)
    assert text is not None
    assert text == emit_with_pyyaml(data)
    assert text == python_emitter_text(data)

    def no_fallback(data: dict[str, Any]) -> str:
        raise AssertionError("dump_yaml fell back to PyYAML")

    monkeypatch.setattr(cdictk.cdi.dump, "emit_with_pyyaml", no_fallback)
    assert dump_yaml(generated) == text
    assert decode_spec(parse_document(text.encode(), "s.yaml"), "s.yaml") == generated


def test_dumping_a_generated_spec_imports_neither_pyyaml_nor_anything_else(generated: Spec) -> None:
    """In a fresh interpreter, with the spec rebuilt from the model alone (no loader): the YAML dump
    adds its two modules and nothing else, so no yaml, json, or the regular expressions of yamlscalar.

    re, typing and dataclasses are not asserted absent: cdictk.cdi.model imports dataclasses, which
    imports both, so they are there before the dump starts; the test fails if the dump brings them in
    once the model no longer does (and test_the_emitter_imports_nothing covers the emitter itself).
    """
    code = (
        "import sys\n"
        "import cdictk.cdi.model as model\n"
        "spec = eval(sys.stdin.read(), vars(model))\n"
        "before = set(sys.modules)\n"
        "from cdictk.cdi.dump import dump\n"
        "text = dump(spec, 'yaml')\n"
        "print(','.join(sorted(set(sys.modules) - before - {'__future__'})))\n"
        "print('yaml' in sys.modules)\n"
        "sys.stdout.write(text)\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-c", code], input=repr(generated), capture_output=True, text=True, check=True
    )
    added, has_yaml, text = result.stdout.split("\n", 2)
    assert added == "cdictk.cdi.dump,cdictk.cdi.yamlemit"
    assert has_yaml == "False"
    assert text == emit_with_pyyaml(to_data(generated))


def imported_modules(code: str) -> set[str]:
    """The modules ``code`` imports in a bare interpreter (no site), from python -X importtime."""
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-X",
            "importtime",
            "-c",
            f"import sys; sys.path.append({str(REPO)!r}); {code}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}


def test_the_emitter_imports_nothing() -> None:
    added = imported_modules("import cdictk.cdi.yamlemit") - imported_modules("pass")
    # __future__: its annotations import, as every module of cdictk has it.
    assert added == {"__future__", "cdictk", "cdictk.cdi", "cdictk.cdi.yamlemit"}


# --- odd strings, as keys and values, in every place a document can hold them ----------------------------


def odd_strings() -> list[str]:
    """Every printable ASCII character alone and at the start, middle and end, and what YAML reads
    as structure, quotes, numbers, bools, nulls, dates; then what the emitter leaves to PyYAML."""
    strings: list[str] = []
    for char in PRINTABLE:
        strings += [char, char * 2, char + "x", "x" + char, "x" + char + "y", char + " ", " " + char]
        strings += ["a " + char + "b", "a" + char + " b", char + "-" + char, "/p/" + char + "/q"]
    strings += [": ", "a: b", "a:", ":a", "a:b", "a::b", "a #b", "a#b", "#a", " a", "a ", "  lead", "trail  "]
    strings += ["-", "- a", "-a", "--a", "--link", "---", "---a", "--- a", "...", "...a", "..", "-- "]
    strings += ["?", "? a", "?a", "a?", "[a", "a]", "{a", "a}", "a,b", "'a", "a'b", "''", '"a', 'a"b', '""']
    strings += ["%a", "@a", "`a", "!a", "&a", "*a", "|", "|a", ">", ">a", "a\\b", "\\", "\\n", "a\\"]
    strings += ["<<", "<", "<<<", "<<a", "=", "==", "=a", "a=", "!", "&", "*", "~", "~a", "a~"]
    strings += [
        *("0", "00", "09", "0660", "0o17", "0O17", "0x1F", "0X1f", "0x_", "-0x_", "0b_", "-0b_", "0b101"),
        *("0b2", "0o8", "08", "0_8", "1_000", "1__0", "_1", "-_1", "+_1", "1_", "0x 1F", "0x-1F", "0x0x1F"),
        *("1.0", "1.", ".5", ".", "1.2.3", "0.5.0", "580.95.05", "1.5.", "1..2", "._5", "-.5", "+.5", "-."),
        *("1e3", "1e+3", "1E-3", "1.5e+3", "1.5e3", ".5e+3", "1.5E-03", "1e", "e1", "+1", "-1", "+-1", "-+1"),
        *("+", "-0", "+0", "-.inf", ".inf", ".Inf", ".INF", "+.inf", ".nan", ".NaN", ".NAN", "-.nan", "inf"),
        *(
            "1:2",
            "1:20",
            "1:60",
            "1:59",
            "0:0",
            "0:1",
            "7:13",
            "0:0:0",
            "190:20:30",
            "1:20.5",
            "1:20.",
            "1:2:",
        ),
        *(
            "1::2",
            ":1",
            "-1:20",
            "+1:20",
            "1_0:20",
            "1:2.3:4",
            "1:2.3.4",
            "12:345",
            "1:2a",
            "1 2",
            "12 ",
            " 12",
        ),
        *("1g.10gb", "3g.40gb", "4k", "0:0:x", "10 abc", "1-2", "2001-12-14", "2001-12-14t21:59:43.10-05:00"),
        *("2001-12-14 21:59:43.10 -5", "2001-12-14 21:59:43.10 Z", "2001-1-1", "2001-12-14T21:59:43"),
        *(
            "2001-12-14  21:59:43+05:00",
            "2001-12-14 1:59:43",
            "2001-12-14T21:59",
            "12345-12-14",
            "2001-12-14x",
        ),
    ]
    for word in ("y", "yes", "n", "no", "true", "false", "on", "off", "null"):
        strings += [word, word.capitalize(), word.upper(), word + "!", word + " ", word + "s", "x" + word]
    strings += ["YeS", "NuLL", "nul", "TRUe", "oN"]
    strings += ["", "x" * 127, "x" * 128, "x" * 129, "x" * 4096, "x" * 4097, "a " * 2048, "a " * 40000]
    strings += ["ü", "é/path", "a\tb", "\t", "a\nb", "yes\n", "\n", "a\r", "\x7f", "\x00", "\x85", "\u2028"]
    strings += ["\ufeff", "日本", "a\x1bb", "trail\n"]
    return list(dict.fromkeys(strings))


STRINGS = odd_strings()


def value_document(text: str) -> dict[str, Any]:
    return {
        "k": text,
        "list": [text, "x", text],
        "nested": {"a": {"b": [{"c": text, "d": []}, [text, {}], {}, [[text]], []]}, "e": {}},
        "flags": [True, False, 0, -5, 1 << 40],
        "after": text,
    }


def key_document(text: str) -> dict[str, Any]:
    return {text: text, "m": {text: [text], "z": {text: {}}}, "l": [{text: 1, "t": True}, {text: []}]}


def fast_expected(text: str, *, as_key: bool) -> bool:
    if as_key and not 0 < len(text) < 128:
        return False
    return text.isascii() and text.isprintable() and len(text) <= 4096


def check(data: dict[str, Any], expect_fast: bool) -> Iterator[str]:
    """What is wrong with the emitter's answer for ``data``: one line each."""
    fast, reference = emit(data), emit_with_pyyaml(data)
    if (fast is not None) != expect_fast:
        yield f"fast path {'not ' if expect_fast else ''}taken"
    if fast is None:
        return
    if fast != reference:
        yield f"libyaml: {reference!r}, ours: {fast!r}"
    if fast != python_emitter_text(data):
        yield f"PyYAML's Python emitter: {python_emitter_text(data)!r}, ours: {fast!r}"
    if parse_document(fast.encode(), "s.yaml") != data:
        yield "our loader reads it back otherwise"
    if yaml.safe_load(fast) != data:
        yield "PyYAML reads it back otherwise"


@pytest.mark.parametrize("as_key", [False, True], ids=["values", "keys"])
def test_odd_strings_come_out_as_pyyaml_writes_them(as_key: bool) -> None:
    problems = []
    for text in STRINGS:
        data = key_document(text) if as_key else value_document(text)
        problems += [
            f"{text[:40]!r}: {problem[:300]}" for problem in check(data, fast_expected(text, as_key=as_key))
        ]
    assert problems == []


def test_empty_and_odd_documents() -> None:
    documents: list[dict[str, Any]] = [
        {},
        {"a": {}},
        {"a": []},
        {"a": [[]]},
        {"a": [{}]},
        {"a": [[[{"b": [[]]}]]]},
    ]
    for data in documents:
        assert emit(data) == emit_with_pyyaml(data) == python_emitter_text(data)
    for odd in (1.5, None, ("t",), b"x", Mode.AUTO, {1: "x"}, "\udcff"):  # no such value in a spec: PyYAML's
        assert emit({"a": odd}) is None
        assert emit({"a": [odd]}) is None
    assert emit({1: "x"}) is None  # type: ignore[dict-item]


# --- the quoting decision against both readers ---------------------------------------------------------


def quoted_by_dump(text: str) -> bool:
    """dump.py's rule: quote what our YAML 1.1 reader or PyYAML's resolver would not read as text."""
    return is_ambiguous(text) or pyyaml_retypes(text)


def probe_strings() -> list[str]:
    """test_yamlscalar's (all printable ASCII up to two characters, numbers, dates and times), and more
    numeric-looking strings, all printable ASCII."""
    strings = resolver_probes()
    near_numbers = "0159+-._:eExXbBoOafgtTZ ~yn<=!&*/"
    strings += ["".join(chars) for chars in itertools.product(near_numbers, repeat=3)]
    tokens = ["0", "1", "5", "7", "9", "12", "59", "60", "2001", "-", "+", ".", "_", ":", "e", "E", "e+", "x"]
    tokens += ["0x", "0b", "0o", "T", "t", "Z", " ", "  ", "a", "F", "g", "inf", "nan", "Inf", "~", "y", "n"]
    rng = random.Random(20)  # noqa: S311 (a fixed seed: the same strings every run)
    strings += ["".join(rng.choices(tokens, k=rng.randint(1, 9))) for _ in range(40000)]
    return [text for text in dict.fromkeys(strings) if text.isascii() and text.isprintable()]


PROBES = probe_strings()


def test_the_quoting_decision_is_dumps_without_its_regular_expressions() -> None:
    wrong = [text for text in PROBES if needs_double_quotes(text) != quoted_by_dump(text)]
    assert wrong == []


def test_what_the_checks_without_regular_expressions_settle_they_settle_right() -> None:
    for text in PROBES:
        if text[0] in "0123456789+-." and text not in _RETYPED_WORDS:
            settled = _settle_number(text)
            assert settled is None or settled == quoted_by_dump(text), text


def test_every_string_pyyaml_retypes_starts_with_a_listed_character() -> None:
    resolvers = yaml.resolver.Resolver.yaml_implicit_resolvers
    assert set(resolvers) - {""} <= _MAY_BE_RETYPED
    assert not [char for char in PRINTABLE if char not in _MAY_BE_RETYPED and quoted_by_dump(char + "1")]


@pytest.mark.parametrize(
    "text", ["0", "0:0", "1:59", "0.5.0", "580.95.05", "12", "/dev/nvidia0", "--link", "1g.10gb"]
)
def test_device_names_versions_and_paths_settle_without_regular_expressions(text: str) -> None:
    assert text[0] not in "0123456789+-." or _settle_number(text) is not None
