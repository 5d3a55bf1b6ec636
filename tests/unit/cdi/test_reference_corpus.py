"""The CDI reference library's outcomes, replayed through cdictk (tests/cdiref).

tests/data/cdi-reference/ holds seeded cases and what ``tags.cncf.io/container-device-interface`` v1.1.0
made of them (``python -m tests.cdiref.regenerate``, docs/testing.md). Every case must come out of
cdictk the same (which files load, which devices resolve from which file, the injected config after
JSON parsing) or differ only as a row of docs/compatibility.md says, recognised by its id.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdictk.cli.main import main
from cdictk.startpath.specs import apply
from tests.cdiref.cases import VERSIONS, make_fixtures
from tests.cdiref.replay import (
    AGREE,
    FILE_MARKERS,
    INJECT_ROWS,
    PANIC_ROWS,
    Outcome,
    classify,
    declared_rows,
    documented_counts,
    load_corpus,
    reapplied,
    run_cdictk,
    spec_files,
)

CASES = load_corpus()
CLI_SAMPLE = 20  # every 20th case also goes through `cdictk cdi inject`


@pytest.fixture
def fixtures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory the reference ran in: the host paths the cases' device nodes name."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    make_fixtures(cwd)
    monkeypatch.chdir(cwd)
    return tmp_path


def replay(tmp: Path, every: int = 1) -> Iterator[tuple[dict[str, Any], Path, Outcome]]:
    for i, case in enumerate(CASES[::every]):
        root = tmp / f"case{i}"
        root.mkdir()
        yield case, root, run_cdictk(case, root)


def test_every_case_agrees_or_differs_as_a_declared_row(fixtures: Path) -> None:
    declared = declared_rows()
    counts: Counter[str] = Counter()
    failures = []
    for case, root, ours in replay(fixtures):
        verdict = classify(case, ours, root)
        undeclared = verdict.rows - declared
        if verdict.unexplained or undeclared:
            failures.append(
                f"{case['id']}: {verdict.unexplained or f'rows {sorted(undeclared)} not in the table'}"
            )
        counts.update(verdict.rows or {AGREE})
    print(f"\n{len(CASES)} cases: " + ", ".join(f"{row} {n}" for row, n in counts.most_common()))
    assert failures == []
    assert len(CASES) >= 2000
    assert counts == documented_counts()


def test_every_row_the_replay_knows_is_in_the_table() -> None:
    known = {*PANIC_ROWS, "last-device-version", "same-dir-override"}
    known |= {row for row, _ in FILE_MARKERS}
    known |= set(INJECT_ROWS)
    assert known - declared_rows() == set()


def _loaded_specs() -> Iterator[dict[str, Any]]:
    """The specs the reference loaded, as a lenient reader sees them (those it cannot read left out)."""
    for case in CASES:
        for name, text in spec_files(case):
            if name in case["ref"]["loaded"]:
                try:
                    spec = next(iter(yaml.load_all(text, Loader=yaml.CSafeLoader)))
                except yaml.YAMLError:
                    continue
                yield spec


def test_the_corpus_covers_every_version_and_every_edit() -> None:
    seen: Counter[str] = Counter()
    for spec in _loaded_specs():
        # (The files the reference loads include some with a key spelled another way: they count less.)
        seen["version " + str(spec.get("cdiVersion")).removeprefix("v")] += 1
        blocks = [spec.get("containerEdits") or {}] + [
            d.get("containerEdits") or {} for d in spec.get("devices") or ()
        ]
        for edits in blocks:
            seen.update(key for key, value in edits.items() if value)
            for node in edits.get("deviceNodes") or ():
                seen.update(f"node {key}" for key in node)
                seen.update(
                    f"node without {key}"
                    for key in ("type", "major", "minor", "permissions", "uid", "gid", "fileMode")
                    if key not in node
                )
            for hook in edits.get("hooks") or ():
                seen.update(f"hook {key}" for key in hook)
    wanted = [f"version {v}" for v in VERSIONS]
    wanted += ["env", "deviceNodes", "mounts", "hooks", "additionalGids", "intelRdt", "netDevices"]
    wanted += [
        f"node {key}"
        for key in ("hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid")
    ]
    wanted += [
        f"node without {key}" for key in ("type", "major", "minor", "permissions", "uid", "gid", "fileMode")
    ]
    wanted += ["hook timeout", "hook env", "hook args"]
    assert {key: seen[key] for key in wanted if seen[key] < 10} == {}
    families = Counter(case["family"] for case in CASES)
    assert set(families) == {"valid", "version", "invalid", "dirs", "inject", "reapply"}
    assert sum(1 for case in CASES if case["ref"].get("config_out") is not None) >= 1000


def test_the_cli_injects_what_the_api_injects(fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checked = 0
    for case, root, ours in replay(fixtures, every=CLI_SAMPLE):
        if case["config"] is None:
            continue
        config = root / "config.json"
        config.write_text(json.dumps(case["config"]))
        args = ["cdi", "inject", "--accept-untrusted-specs", "--output", "-", str(config)]
        for i, files in enumerate(case["dirs"]):
            if files is not None:
                args += ["--spec-dir", str(root / f"d{i}")]
        for device in case["devices"]:
            args += ["--device", device]
        code = main(args)
        out, err = capsys.readouterr()
        if ours.error is not None:
            assert (code, out) == (1, ""), case["id"]
            continue
        assert (code, json.loads(out)) == (0, ours.result), (case["id"], err)
        if case["ref"].get("config_out") is not None and not classify(case, ours, root).rows:
            assert json.loads(out) == case["ref"]["config_out"]
        checked += 1
    assert checked >= 50


def test_a_reapply_rule_that_overlooks_missing_edits_is_caught(
    fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cdictk's rule cut to "every hook is there": configs that lack nodes, env or mounts are left alone.
    def lenient(self: Any, config: dict[str, Any]) -> bool:
        hooks = config.get("hooks") or {}
        return all(hook in (hooks.get(stage) or ()) for stage, hook in self.hooks)

    monkeypatch.setattr(apply._Edits, "present", lenient)
    caught = [
        case["id"] for case, root, ours in replay(fixtures, every=2) if classify(case, ours, root).unexplained
    ]
    assert len(caught) >= 50


HOOK = {"path": "/bin/h"}
ALLOW = {"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"}
DENY = {"allow": False, "access": "rwm"}
NODE = {"path": "/dev/x", "type": "c", "major": 1, "minor": 3}


def _config(**parts: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"ociVersion": "1.2.0", "process": {"env": parts.get("env", ["A=1"])}}
    config["hooks"] = {"createContainer": parts.get("hooks", [HOOK])}
    config["linux"] = {
        "devices": parts.get("nodes", [NODE]),
        "resources": {"devices": parts.get("rules", [ALLOW])},
    }
    config["mounts"] = parts.get("mounts", [{"destination": "/proc"}, {"destination": "/a/b"}])
    return config


@pytest.mark.parametrize(
    ("mine", "theirs", "expected"),
    [
        (_config(), _config(hooks=[HOOK, HOOK], rules=[ALLOW, ALLOW], env=["A=1", "A=1"]), True),
        (_config(), _config(hooks=[HOOK, {"path": "/bin/other"}]), False),  # a hook the config lacks
        (_config(env=["A=1", "A=2"]), _config(env=["A=1", "A=2", "A=1"]), False),  # A's value changes
        (_config(env=["A"]), _config(env=["A=1"]), False),  # the library replaces a bare name
        (_config(rules=[ALLOW, DENY]), _config(rules=[ALLOW, DENY, ALLOW]), False),  # now allowed
        (_config(nodes=[NODE, {"path": "/dev/y"}]), _config(nodes=[{"path": "/dev/y"}, NODE]), True),
        (_config(nodes=[{**NODE, "minor": 5}, NODE]), _config(nodes=[NODE]), False),  # a decoy dropped
        (
            _config(mounts=[{"destination": "/a/b"}, {"destination": "/proc"}]),
            _config(mounts=[{"destination": "/proc"}, {"destination": "/a/b"}]),
            True,  # neither hides the other
        ),
        (
            _config(mounts=[{"destination": "/a/b"}, {"destination": "/a"}]),
            _config(mounts=[{"destination": "/a"}, {"destination": "/a/b"}]),
            False,  # /a hid /a/b
        ),
        (
            _config(mounts=[{"destination": "/d"}, {"destination": "/", "source": "/r"}]),
            _config(mounts=[{"destination": "/", "source": "/r"}, {"destination": "/d"}]),
            False,
        ),
        (_config(), {**_config(), "hostname": "x"}, False),  # anything else changed
    ],
)
def test_reapply_is_recognised_from_the_configs_alone(
    mine: dict[str, Any], theirs: dict[str, Any], expected: bool
) -> None:
    assert reapplied(mine, theirs) is expected
