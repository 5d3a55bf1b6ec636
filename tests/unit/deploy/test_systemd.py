"""deploy/systemd and deploy/udev: the spec-refresh units as shipped, and as `cdictk system install` writes them.

``systemd-analyze verify`` runs on the real files, byte for byte, under ``--root`` (a temporary root
holding the system's own units, the shipped ones in ``etc/systemd/system`` and stand-ins for the two
programs they run), since this machine has neither cdictk at /opt/cdictk/bin nor systemd as PID 1.
verify exits 0 on unknown keys and unparsable values (it only warns), so every line it prints about
our units counts as a failure; broken copies prove that each kind of mistake is caught.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from cdictk.noderuntime.nodesetup import unit_text
from tests import REPO

SYSTEMD = REPO / "deploy" / "systemd"
UDEV_RULE = REPO / "deploy" / "udev" / "99-cdictk-cdi-refresh.rules"
REFRESH = "cdictk-cdi-refresh.service"
PATH_UNIT = "cdictk-cdi-refresh.path"
WATCH = "cdictk-cdi-watch.service"
UNITS = (REFRESH, PATH_UNIT, WATCH)
SERVICES = (REFRESH, WATCH)
CDICTK = "/opt/cdictk/bin/cdictk"
# Every program the units run; the verify root has these and nothing else of ours.
PROGRAMS = {CDICTK, "/bin/sh"}
OUTPUT = "/var/run/cdi/nvidia.yaml"
ENV_FILE = "/etc/cdictk/cdi-refresh.env"
# Where distributions keep their units; the verify root gets a copy of each that exists.
SYSTEM_UNIT_DIRS = ("/usr/lib/systemd/system", "/lib/systemd/system")
EXEC_KEYS = ("ExecCondition", "ExecStartPre", "ExecStart", "ExecStartPost", "ExecStop", "ExecReload")

Unit = dict[str, list[tuple[str, str]]]


def parse(text: str) -> Unit:
    """Sections of a unit file as (key, value) lists, in order (no continuation lines in ours)."""
    sections: Unit = {}
    current: list[tuple[str, str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        assert not line.endswith("\\"), f"line {number}: continuation lines are not expected"
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"line {number}: {line!r} before any section"
        key, sep, value = line.partition("=")
        assert sep, f"line {number}: {line!r} is not KEY=VALUE"
        current.append((key.strip(), value.strip()))
    return sections


def unit(name: str) -> Unit:
    return parse((SYSTEMD / name).read_text(encoding="utf-8"))


def values(parsed: Unit, section: str, key: str) -> list[str]:
    return [value for k, value in parsed.get(section, []) if k == key]


def one(parsed: Unit, section: str, key: str) -> str:
    found = values(parsed, section, key)
    assert len(found) == 1, f"[{section}] {key}= is set {len(found)} times, expected once"
    return found[0]


def program(command: str) -> str:
    """The executable of an Exec*= value, without systemd's prefixes (-, @, :, +, !)."""
    return shlex.split(command)[0].lstrip("-@:+!")


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    return found


def make_root(tmp_path: Path, units: dict[str, str], programs: frozenset[str] = frozenset(PROGRAMS)) -> Path:
    """A root for ``systemd-analyze --root``: the system's units, ``units`` and stand-ins of ``programs``."""
    root = tmp_path / "root"
    copied: set[str] = set()
    for directory in SYSTEM_UNIT_DIRS:
        real = os.path.realpath(directory)
        if os.path.isdir(real) and real not in copied:
            copied.add(real)
            shutil.copytree(real, root / directory.lstrip("/"), symlinks=True)
    if not copied:
        pytest.skip("no system unit directory (/usr/lib/systemd/system) to verify against")
    local = root / "etc" / "systemd" / "system"
    local.mkdir(parents=True)
    for name, text in units.items():
        (local / name).write_text(text, encoding="utf-8")
    for path in programs:
        stand_in = root / path.lstrip("/")
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        stand_in.chmod(0o755)
    return root


def shipped() -> dict[str, str]:
    return {name: (SYSTEMD / name).read_text(encoding="utf-8") for name in UNITS}


def verify(
    tmp_path: Path, units: dict[str, str], programs: frozenset[str] = frozenset(PROGRAMS)
) -> list[str]:
    """What ``systemd-analyze verify`` finds wrong with ``units``: [] when they are clean."""
    analyze = systemd_analyze()
    root = make_root(tmp_path, units, programs)
    result = subprocess.run(
        [analyze, "verify", "--man=no", f"--root={root}", *units],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""},
        check=False,
    )
    lines = (result.stdout + result.stderr).splitlines()
    problems = [line for line in lines if any(name in line for name in units)]
    if result.returncode != 0:
        problems.append(f"exit status {result.returncode}: {' | '.join(lines)}")
    return problems


def test_the_shipped_units_pass_verify(tmp_path: Path) -> None:
    assert verify(tmp_path, shipped()) == []
    # verified as they are: the root holds the very bytes that are shipped
    for name, text in shipped().items():
        assert (tmp_path / "root/etc/systemd/system" / name).read_text(encoding="utf-8") == text


def test_the_units_as_the_install_writes_them_pass_verify(tmp_path: Path) -> None:
    """`cdictk system install` writes them marked and with its prefix: still clean, and running it."""
    written = {name: unit_text(name, "/srv/cdictk").decode() for name in UNITS}
    programs = frozenset({"/srv/cdictk/bin/cdictk", "/bin/sh"})
    assert verify(tmp_path, written, programs) == []
    for name in SERVICES:
        commands = [value for key, value in parse(written[name])["Service"] if key in EXEC_KEYS]
        assert {program(command) for command in commands} == programs
    assert "PathChanged=/srv/cdictk/bin/cdictk" in written[PATH_UNIT]


BROKEN = [
    # (unit, what to replace, with what, what verify must say, as a regular expression)
    (
        REFRESH,
        "\nProtectHome=read-only\n",
        "\nProtectHome=read-only\nProtectHom=yes\n",
        "Unknown key (name )?'ProtectHom'",  # systemd 255 (Ubuntu 24.04) adds "name"
    ),
    (REFRESH, "Type=oneshot", "Type=oneshoot", "oneshoot"),
    (WATCH, "[Service]", "[Servce]", "Unknown section 'Servce'"),
    (WATCH, "Restart=on-failure", "Restart=on-failures", "on-failures"),
    (WATCH, f"ExecStart={CDICTK} ", "ExecStart=/opt/cdictk/bin/cdicktk ", "/opt/cdictk/bin/cdicktk"),
    (PATH_UNIT, "PathChanged=/opt/cdictk", "PathChange=/opt/cdictk", "Unknown key (name )?'PathChange'"),
    (
        PATH_UNIT,
        "Unit=cdictk-cdi-refresh.service",
        "Unit=cdictk-cdi-refresh.servic",
        "cdictk-cdi-refresh.servic",
    ),
]


@pytest.mark.parametrize(("name", "old", "new", "said"), BROKEN)
def test_a_broken_copy_fails_verify(tmp_path: Path, name: str, old: str, new: str, said: str) -> None:
    units = shipped()
    assert units[name].count(old) == 1, f"{old!r} should be in {name} once"
    units[name] = units[name].replace(old, new)
    problems = verify(tmp_path, units)
    assert problems, f"verify accepted {name} with {new!r}"
    assert any(re.search(said, line) for line in problems), problems


def capabilities_systemd_reads(tmp_path: Path, units: dict[str, str], name: str) -> set[str]:
    """The bounding set as systemd parsed it, from verify's debug dump of the unit.

    systemd drops a capability name it does not know without a word, even at verify: comparing what
    it read with what the file says is the only way to catch a misspelt one.
    """
    analyze = systemd_analyze()
    root = make_root(tmp_path, units)
    result = subprocess.run(
        [analyze, "verify", "--man=no", f"--root={root}", name],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "debug", "SYSTEMD_LOG_COLOR": "0"},
        check=False,
    )
    dump = (result.stdout + result.stderr).split(f"-> Unit {name}:", 1)
    assert len(dump) == 2, f"no dump of {name} in verify's debug output"
    found = re.findall(r"^\s*CapabilityBoundingSet: (.*)$", dump[1], flags=re.MULTILINE)
    assert found, f"no CapabilityBoundingSet in the dump of {name}"
    return {capability.upper() for capability in found[0].split()}


@pytest.mark.parametrize("name", SERVICES)
def test_systemd_knows_every_capability_named(tmp_path: Path, name: str) -> None:
    named = set(one(unit(name), "Service", "CapabilityBoundingSet").split())
    assert capabilities_systemd_reads(tmp_path / "shipped", shipped(), name) == named
    units = shipped()
    units[name] = units[name].replace("=CAP_SYS_MODULE ", "=CAP_SYS_MODUL ")
    assert capabilities_systemd_reads(tmp_path / "typo", units, name) == named - {"CAP_SYS_MODULE"}


def security(tmp_path: Path, units: dict[str, str], name: str) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze security --offline``, failing above exposure 5.0 (out of 10)."""
    analyze = systemd_analyze()
    root = make_root(tmp_path, units)
    result = subprocess.run(
        [analyze, "security", "--offline=yes", "--threshold=50", f"--root={root}", "--no-pager", name],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""},
        check=False,
    )
    if "--offline" in result.stderr or "--threshold" in result.stderr:
        pytest.skip(f"this systemd-analyze has no offline security review: {result.stderr.strip()}")
    return result


@pytest.mark.parametrize("name", SERVICES)
def test_the_services_are_hardened(tmp_path: Path, name: str) -> None:
    result = security(tmp_path / "shipped", shipped(), name)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    # and the review can fail: the same unit without its hardening scores far above the threshold
    units = shipped()
    text = units[name]
    units[name] = text[: text.index("# Hardening.")] + text[text.index("[Install]") :]
    assert security(tmp_path / "bare", units, name).returncode != 0


def test_both_services_have_the_same_hardening() -> None:
    def hardening(name: str) -> str:
        text = (SYSTEMD / name).read_text(encoding="utf-8")
        return text[text.index("# Hardening.") : text.index("[Install]")]

    assert hardening(REFRESH) == hardening(WATCH)


@pytest.mark.parametrize("name", SERVICES)
def test_the_sandbox_leaves_what_cdictk_needs(name: str) -> None:
    service = unit(name)
    assert one(service, "Service", "ProtectSystem") == "strict"
    assert one(service, "Service", "NoNewPrivileges") == "yes"
    # the spec's directory is the one place made writable, and it outlives the unit
    assert one(service, "Service", "RuntimeDirectory") == "cdi"
    assert one(service, "Service", "RuntimeDirectoryPreserve") == "yes"
    argv = shlex.split(one(service, "Service", "ExecStart"))
    output = argv[argv.index("--output") + 1]
    assert os.path.dirname(output).replace("/var/run/", "/run/", 1) == "/run/" + one(
        service, "Service", "RuntimeDirectory"
    )
    capabilities = set(one(service, "Service", "CapabilityBoundingSet").split())
    assert {"CAP_SYS_MODULE", "CAP_MKNOD", "CAP_SYS_ADMIN", "CAP_SYS_CHROOT"} <= capabilities
    assert not any(cap.startswith("~") for cap in capabilities), "an allow list, not a deny list"
    keys = {key for key, _ in service["Service"]}
    # each of these would hide /dev/nvidia*, the host's /tmp/nvidia-mps, or forbid modprobe
    for forbidden in ("PrivateDevices", "DeviceAllow", "DevicePolicy", "ProtectClock", "PrivateTmp"):
        assert forbidden not in keys, forbidden
    assert values(service, "Service", "ProtectKernelModules") in ([], ["no"])
    assert values(service, "Service", "ReadOnlyPaths") == []
    assert one(service, "Install", "WantedBy") == "multi-user.target"


def test_refresh_service_makes_nodes_best_effort_then_generates() -> None:
    service = unit(REFRESH)
    assert one(service, "Service", "Type") == "oneshot"
    # an active oneshot could not be started again by the .path unit or udev
    assert values(service, "Service", "RemainAfterExit") in ([], ["no"])
    pre = one(service, "Service", "ExecStartPre")
    assert pre.startswith("-"), "a failure to make device nodes must not stop the spec"
    assert shlex.split(pre.lstrip("-"))[:5] == [
        CDICTK,
        "system",
        "create-device-nodes",
        "--control-devices",
        "--load-kernel-modules",
    ]
    start = one(service, "Service", "ExecStart")
    assert shlex.split(start)[:5] == [CDICTK, "cdi", "generate", "--output", OUTPUT]
    assert "--watch" not in start
    assert one(service, "Service", "EnvironmentFile") == f"-{ENV_FILE}"
    assert one(service, "Service", "Restart") == "on-failure"


def test_watch_service_runs_the_watcher() -> None:
    service = unit(WATCH)
    assert one(service, "Service", "Type") in ("exec", "simple")
    argv = shlex.split(one(service, "Service", "ExecStart"))
    assert argv[:6] == [CDICTK, "cdi", "generate", "--watch", "--output", OUTPUT]
    assert one(service, "Service", "Restart") == "on-failure"
    assert one(service, "Service", "EnvironmentFile") == f"-{ENV_FILE}"
    assert one(service, "Service", "ExecStartPre") == one(unit(REFRESH), "Service", "ExecStartPre")


@pytest.mark.parametrize("name", SERVICES)
def test_units_run_only_known_programs(name: str) -> None:
    service = unit(name)
    commands = [value for key, value in service["Service"] if key in EXEC_KEYS]
    assert commands
    assert {program(command) for command in commands} <= PROGRAMS


def test_variables_have_defaults_and_are_documented() -> None:
    example = (SYSTEMD / "cdi-refresh.env").read_text(encoding="utf-8")
    documented = set(re.findall(r"^#?([A-Z][A-Z0-9_]*)=", example, flags=re.MULTILINE))
    for line in example.splitlines():  # a valid EnvironmentFile: comments and NAME=value
        assert not line.strip() or line.startswith("#") or re.match(r"[A-Z][A-Z0-9_]*=", line), line
    for name in SERVICES:
        service = unit(name)
        defaults = {
            assignment.partition("=")[0]
            for value in values(service, "Service", "Environment")
            for assignment in value.split()
        }
        used = {
            variable
            for key, value in service["Service"]
            if key in EXEC_KEYS
            for variable in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", value)
        }
        assert used, name
        # unset, $NAME would be left in the command line; each one defaults to empty instead
        assert used <= defaults, (name, used - defaults)
        assert used <= documented, (name, used - documented)
        # $NAME splits into words (zero for an empty value); ${NAME} would pass one empty argument
        for key, value in service["Service"]:
            if key in EXEC_KEYS:
                assert "${" not in value, (name, key)


def test_path_unit_watches_the_driver_and_what_the_service_runs() -> None:
    path = unit(PATH_UNIT)
    watched = values(path, "Path", "PathChanged")
    assert "/lib/modules/%v/modules.dep" in watched
    assert "/lib/modules/%v/modules.dep.bin" in watched
    target = one(path, "Path", "Unit")
    assert target == REFRESH and (SYSTEMD / target).is_file()
    assert program(one(unit(target), "Service", "ExecStart")) in watched
    assert one(path, "Install", "WantedBy") == "multi-user.target"


def condition_script(name: str) -> str:
    argv = shlex.split(one(unit(name), "Service", "ExecCondition"))
    assert argv[:2] == ["/bin/sh", "-c"] and len(argv) == 3
    assert "/lib/modules/%v/modules.dep" in argv[2] and "/proc/driver/nvidia" in argv[2]
    return argv[2]


@pytest.mark.parametrize(
    ("modules_dep", "driver_loaded", "runs"),
    [
        ("kernel/drivers/video/nvidia.ko: kernel/drivers/video/nvidia-modeset.ko\n", False, True),
        ("updates/dkms/nvidia-current.ko.xz:\n", False, True),  # Debian's name, compressed
        ("extra/nvidia.ko.zst:\n", False, True),
        ("kernel/drivers/gpu/drm/nouveau/nouveau.ko: kernel/drivers/video/nvidia-fb.ko\n", False, False),
        ("kernel/drivers/gpu/drm/nouveau/nouveau.ko:\n", True, True),  # a driver container loaded it
        (None, False, False),  # no modules.dep at all
    ],
)
@pytest.mark.parametrize("name", SERVICES)
def test_exec_condition_runs_only_with_an_nvidia_driver(
    tmp_path: Path, name: str, modules_dep: str | None, driver_loaded: bool, runs: bool
) -> None:
    dep = tmp_path / "modules.dep"
    if modules_dep is not None:
        dep.write_text(modules_dep, encoding="utf-8")
    proc = tmp_path / "proc-driver-nvidia"
    if driver_loaded:
        proc.mkdir()
    script = condition_script(name).replace("/lib/modules/%v/modules.dep", str(dep))
    script = script.replace("/proc/driver/nvidia", str(proc))
    result = subprocess.run(["/bin/sh", "-c", script], capture_output=True, timeout=30, check=False)
    assert (result.returncode == 0) is runs, result.stderr


def test_udev_rule_starts_the_refresh_service_on_nvidia_module_load() -> None:
    token = re.compile(r'\s*([A-Z_]+(?:\{[A-Z_]+\})?)\s*(==|!=|\+=|-=|:=|=)\s*"([^"]*)"\s*(?:,|$)')
    rules = [
        line
        for line in UDEV_RULE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert len(rules) == 1
    rule, position = rules[0], 0
    parsed: list[tuple[str, str, str]] = []
    while position < len(rule):
        match = token.match(rule, position)
        assert match, f'not a udev KEY OP "VALUE" at {rule[position:]!r}'
        key, op, value = match.groups()
        parsed.append((key, op, value))
        position = match.end()
    assert ("ACTION", "==", "add") in parsed
    assert ("SUBSYSTEM", "==", "module") in parsed
    assert ("TAG", "+=", "systemd") in parsed
    kernel = [value for key, op, value in parsed if key == "KERNEL" and op == "=="]
    assert kernel and set(kernel[0].split("|")) == {"nvidia", "nvidia_current"}
    wants = [value for key, op, value in parsed if key == "ENV{SYSTEMD_WANTS}" and op == "+="]
    assert wants == [REFRESH] and (SYSTEMD / REFRESH).is_file()
