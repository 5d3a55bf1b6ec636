import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdictk.cli.main import main
from tests import REPO

EXAMPLE = REPO / "examples" / "cdi" / "nvidia.yaml"

SPEC = """cdiVersion: 0.5.0
kind: vendor.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes: [{path: /dev/gpu0, hostPath: /dev/null}]
- name: "1"
  containerEdits:
    env: [GPU1=1]
containerEdits:
  env: [COMMON=1]
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "cdi"
    directory.mkdir()
    (directory / "vendor.yaml").write_text(SPEC)
    return directory


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"ociVersion": "1.0.2", "process": {"env": ["PATH=/bin"], "cwd": "/"}}))
    path.chmod(0o600)
    return path


def test_validate_valid_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "cdi", "validate", str(EXAMPLE)) == (
        0,
        f"{EXAMPLE}: valid (cdiVersion 0.5.0, 3 devices)\n",
        "",
    )


def test_validate_prints_one_line_per_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "cdiVersion: 0.3.0\nkind: v.com/cls\ndevices:\n- name: gpu0\n  containerEdits:\n    env: [FOO]\n    hooks: [{hookName: x, path: /h}]\n"
    )
    code, out, err = run(capsys, "cdi", "validate", str(bad), str(EXAMPLE))
    assert code == 1
    assert out == f"{EXAMPLE}: valid (cdiVersion 0.5.0, 3 devices)\n"
    assert err.splitlines() == [
        f'cdictk: error: {bad}: devices[0].containerEdits.env[0]: invalid environment variable "FOO" (want NAME=VALUE)',
        f'cdictk: error: {bad}: devices[0].containerEdits.hooks[0].hookName: invalid hook name "x" '
        "(want one of prestart, createRuntime, createContainer, startContainer, poststart, poststop)",
    ]


def test_validate_reports_schema_findings_after_a_decoding_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"cdiVersion": "0.3.0", "kind": "v.com/c", "xyzzy": 1, "devices": [{"name": "-d", "containerEdits": {}}]}'
    )
    code, _, err = run(capsys, "cdi", "validate", str(bad))
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith(f"cdictk: error: {bad}: xyzzy: unknown field")
    assert any("devices[0].name" in line for line in lines[1:])
    assert not any("Additional properties" in line for line in lines)


def test_validate_missing_and_malformed_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("a: [")
    code, out, err = run(
        capsys, "cdi", "validate", str(tmp_path / "missing.yaml"), str(tmp_path / "bad.yaml")
    )
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"cdictk: error: {tmp_path}/missing.yaml: No such file or directory",
        f"cdictk: error: {tmp_path}/bad.yaml: invalid YAML: did not find expected node content (line 2, column 1)",
    ]


def test_validate_warns_about_a_needlessly_new_version(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = tmp_path / "new.yaml"
    spec.write_text(SPEC.replace("0.5.0", "1.0.0"))
    code, out, err = run(capsys, "cdi", "validate", str(spec))
    assert code == 0 and "valid (cdiVersion 1.0.0, 2 devices)" in out
    assert (
        err
        == f"cdictk: warning: {spec}: cdiVersion: 1.0.0 is newer than the content needs (0.5.0): runtimes with an older CDI library refuse it\n"
    )


def test_validate_spec_dirs_reports_conflicts(capsys: pytest.CaptureFixture[str], spec_dir: Path) -> None:
    (spec_dir / "other.yaml").write_text(SPEC)
    code, out, err = run(capsys, "cdi", "validate", "--spec-dir", str(spec_dir))
    assert code == 1
    # Each file is valid on its own; the conflict between them is the problem, reported for both.
    assert out.count(": valid (cdiVersion 0.5.0, 2 devices)") == 2
    assert err.count('conflicting device "vendor.com/gpu=0"') == 2
    assert err.count('conflicting device "vendor.com/gpu=1"') == 2


def minimal_json(kind: str = "vendor.com/gpu", after_env: str = "", after_devices: str = "") -> str:
    return (
        f'{{"cdiVersion": "0.3.0", "kind": "{kind}",\n'
        f' "devices": [{{"name": "d", "containerEdits": {{"env": ["A=1"{after_env}]}}}}]{after_devices}}}\n'
    )


@pytest.mark.parametrize(
    ("text", "position"),
    [
        (minimal_json(after_devices=","), "line 2, column 64"),
        (minimal_json(after_env=", "), "line 2, column 60"),
        (minimal_json(after_devices=",\n"), "line 2, column 64"),
    ],
)
def test_validate_refuses_a_json_spec_with_a_trailing_comma(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, position: str
) -> None:
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    spec = spec_dir / "trailing.json"
    spec.write_text(text)
    assert run(capsys, "cdi", "validate", str(spec)) == (
        1, "", f"cdictk: error: {spec}: invalid JSON: trailing comma ({position})\n"
    )  # fmt: skip
    # The Go library reads .json specs as YAML, which allows the comma, so runtimes use the device.
    assert run(capsys, "cdi", "list", "--spec-dir", str(spec_dir)) == (0, "vendor.com/gpu=d\n", "")


def test_validate_reads_a_yaml_file_in_flow_style_as_yaml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = tmp_path / "flow.yaml"
    spec.write_text(minimal_json(after_devices=","))
    assert run(capsys, "cdi", "validate", str(spec)) == (
        0, f"{spec}: valid (cdiVersion 0.3.0, 1 device)\n", ""
    )  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        (
            "my_vendor.com/gpu",
            'invalid vendor "my_vendor.com": the CDI specification wants a DNS subdomain, without "_"',
        ),
        ("v" * 250 + ".com/gpu", "invalid vendor: 254 characters, over the CDI specification's limit of 253"),
        ("vendor.com/" + "c" * 64, "invalid class: 64 characters, over the CDI specification's limit of 63"),
    ],
)
def test_validate_refuses_a_kind_that_breaks_the_specification(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, reason: str
) -> None:
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    spec = spec_dir / "kind.json"
    spec.write_text(minimal_json(kind))
    assert run(capsys, "cdi", "validate", str(spec)) == (1, "", f"cdictk: error: {spec}: kind: {reason}\n")
    # The reference library accepts such kinds, so runtimes use the device.
    assert run(capsys, "cdi", "list", "--spec-dir", str(spec_dir)) == (0, f"{kind}=d\n", "")


def test_validate_accepts_a_kind_at_the_specification_limits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    spec = tmp_path / "limits.json"
    spec.write_text(minimal_json("v" * 249 + ".com/" + "c_" * 31 + "c"))
    assert run(capsys, "cdi", "validate", str(spec)) == (
        0, f"{spec}: valid (cdiVersion 0.3.0, 1 device)\n", ""
    )  # fmt: skip


def test_list(capsys: pytest.CaptureFixture[str], spec_dir: Path) -> None:
    (spec_dir / "broken.json").write_text("{")
    code, out, err = run(capsys, "cdi", "list", "--spec-dir", str(spec_dir))
    assert (code, out) == (0, "vendor.com/gpu=0\nvendor.com/gpu=1\n")
    assert err.startswith(f"cdictk: warning: {spec_dir}/broken.json: invalid JSON")
    code, out, _ = run(capsys, "cdi", "list", "--spec-dir", str(spec_dir), "--json")
    assert json.loads(out) == [
        {"name": "vendor.com/gpu=0", "spec": f"{spec_dir}/vendor.yaml"},
        {"name": "vendor.com/gpu=1", "spec": f"{spec_dir}/vendor.yaml"},
    ]


def test_list_named_dir_must_exist(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(capsys, "cdi", "list", "--spec-dir", str(tmp_path / "none")) == (
        1, "", f"cdictk: error: {tmp_path}/none: no such spec directory\n",
    )  # fmt: skip


def test_inject_rewrites_config_atomically(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, config: Path
) -> None:
    code, out, err = run(
        capsys, "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "vendor.com/gpu=0", str(config)
    )
    assert (code, out, err) == (0, "", "")
    result = json.loads(config.read_text())
    assert result["process"]["env"] == ["PATH=/bin", "COMMON=1"]
    assert result["linux"]["devices"][0]["path"] == "/dev/gpu0"
    assert config.stat().st_mode & 0o777 == 0o600
    once = config.read_bytes()
    assert (
        run(capsys, "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "vendor.com/gpu=0", str(config))[0]
        == 0
    )
    assert config.read_bytes() == once


def test_inject_to_stdout_and_from_stdin(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = config.read_bytes()
    code, out, _ = run(
        capsys, "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "vendor.com/gpu=1", "-o", "-", str(config)
    )
    assert code == 0 and json.loads(out)["process"]["env"] == ["PATH=/bin", "COMMON=1", "GPU1=1"]
    assert config.read_bytes() == before
    result = subprocess.run(
        [sys.executable, "-m", "cdictk", "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "vendor.com/gpu=1", "-"],
        input=before, capture_output=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["process"]["env"][-1] == "GPU1=1"


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("vendor.com/gpu=9", "cdictk: error: vendor.com/gpu=9: unresolvable CDI device (spec dirs: {dir})"),
        (
            "gpu0",
            'cdictk: error: gpu0: "gpu0" is not a qualified CDI device name (want vendor.com/class=name)',
        ),
    ],
)
def test_inject_failure_writes_nothing(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, config: Path, device: str, message: str
) -> None:
    before = config.read_bytes()
    mtime = config.stat().st_mtime_ns
    code, out, err = run(
        capsys,
        "cdi",
        "inject",
        "--spec-dir",
        str(spec_dir),
        "-d",
        "vendor.com/gpu=0",
        "-d",
        device,
        str(config),
    )
    assert (code, out, err) == (1, "", message.format(dir=spec_dir) + "\n")
    assert config.read_bytes() == before and config.stat().st_mtime_ns == mtime
    assert sorted(os.listdir(config.parent)) == ["cdi", "config.json"]  # and no temp file


@pytest.mark.parametrize(
    ("content", "reason"), [("[]", "an OCI config must be a JSON object"), ("{", "invalid JSON")]
)
def test_inject_refuses_bad_configs(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(content)
    code, _, err = run(
        capsys, "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "vendor.com/gpu=0", str(path)
    )
    assert code == 1 and err.startswith(f"cdictk: error: {path}: {reason}")
    assert path.read_text() == content


def test_inject_refuses_a_symlinked_config(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, config: Path
) -> None:
    link = config.parent / "link.json"
    link.symlink_to(config)
    code, _, err = run(
        capsys, "cdi", "inject", "--spec-dir", str(spec_dir), "-d", "vendor.com/gpu=0", str(link)
    )
    assert code == 1 and err == f"cdictk: error: {link}: is a symlink; refusing to replace it\n"


def test_inject_needs_a_device(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    code, _, err = run(capsys, "cdi", "inject", str(config))
    assert code == 2 and "Missing option '--device'" in err


@pytest.mark.parametrize("command", [[], ["cdi"], ["cdi", "validate"], ["cdi", "list"], ["cdi", "inject"]])
def test_help(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code, out, _ = run(capsys, *command, "--help")
    assert code == 0 and out.startswith("Usage: cdictk")


def test_version_through_python_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cdictk", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and result.stdout.startswith("cdictk, version ")


def plant(spec_dir: Path) -> Path:
    """A spec of another user, with a hook of theirs, which root would run."""
    path = spec_dir / "planted.yaml"
    path.write_text(
        SPEC.replace('name: "1"', 'name: "planted"')
        + "  hooks: [{hookName: createRuntime, path: /home/user/evil}]\n"
    )
    os.chown(path, 12345, 12345)
    return path


@pytest.mark.root
def test_inject_skips_a_spec_of_another_user_and_warns(
    capsys: pytest.CaptureFixture[str], spec_dir: Path, tmp_path: Path
) -> None:
    plant(spec_dir)
    config = tmp_path / "config.json"
    config.write_text('{"ociVersion": "1.0.2", "process": {"env": []}}')
    base = ["cdi", "inject", "--spec-dir", str(spec_dir), "-d", "vendor.com/gpu=planted", str(config)]
    code, _, err = run(capsys, *base)
    assert code == 1 and f"warning: {spec_dir / 'planted.yaml'}: not trusted, skipped" in err
    assert "/home/user/evil" not in config.read_text()
    code, _, err = run(capsys, *base[:2], "--accept-untrusted-specs", *base[2:])
    assert code == 0, err
    assert "/home/user/evil" in config.read_text()


@pytest.mark.root
def test_list_and_validate_name_the_skipped_file(capsys: pytest.CaptureFixture[str], spec_dir: Path) -> None:
    planted = plant(spec_dir)
    code, out, err = run(capsys, "cdi", "list", "--spec-dir", str(spec_dir))
    assert code == 0 and "vendor.com/gpu=planted" not in out and "vendor.com/gpu=0" in out
    assert f"warning: {planted}: not trusted, skipped" in err
    code, out, err = run(capsys, "cdi", "validate", "--spec-dir", str(spec_dir))
    assert code == 1 and f"error: {planted}: not trusted, skipped" in err


def test_transform_root_writes_the_moved_spec(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = tmp_path / "in.yaml"
    source.write_text(
        "cdiVersion: 0.5.0\nkind: vendor.com/gpu\ndevices:\n- name: '0'\n  containerEdits:\n"
        "    mounts: [{hostPath: /run/nvidia/driver/usr/lib/libcuda.so.1, containerPath: /usr/lib/libcuda.so.1}]\n"
    )
    target = tmp_path / "cdi" / "out.json"
    args = ["cdi", "transform", "root", "--from", "/run/nvidia/driver", "--to", "/"]
    code, _, err = run(capsys, *args, "--input", str(source), "--output", str(target))
    assert code == 0, err
    mount = json.loads(target.read_text())["devices"][0]["containerEdits"]["mounts"][0]
    assert mount == {"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1"}
    assert target.stat().st_mode & 0o777 == 0o644
    code, _, err = run(capsys, *args, "--input", str(tmp_path / "missing.yaml"), "--output", str(target))
    assert code == 1 and err.count("\n") == 1 and "missing.yaml" in err
