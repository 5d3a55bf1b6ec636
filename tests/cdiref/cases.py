"""Seeded cases for the CDI reference corpus: spec files in spec dirs, an OCI config, the devices asked for.

Every cdiVersion and every edit kind (env, device nodes with and without type, major, minor, fileMode,
permissions, uid and gid, mounts, hooks with timeout and env, additionalGids, intelRdt, netDevices),
valid specs and mutated ones, conflicts across spec dirs, configs that already hold some of the edits.
A case is plain data:

``{"id", "family", "dirs": [{file name: text} | None (a dir that does not exist)], "config", "devices"}``

Device nodes point at host nodes every Linux has (``/dev/null``, ...) or at the fixtures that
:func:`make_fixtures` makes in the working directory (a FIFO, a file, a symlink, a directory), which
the reference run and the replay both start in.
"""

from __future__ import annotations

import copy
import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

SEED = 27
VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
HOST_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
FIXTURE_NODES = ("fx/fifo", "fx/file", "fx/link", "fx/dir", "fx/missing")
VENDORS = ("vendor.com", "nvidia.com", "example.org", "acme.io")
CLASSES = ("gpu", "net", "fpga")
NAMES = ("gpu0", "gpu1", "a", "b", "dev-1", "x.y", "c:d", "mig1:0", "all")
ENV_KEYS = ("A", "B", "NVIDIA_VISIBLE_DEVICES", "PATH", "LD_LIBRARY_PATH")
ENV_VALUES = ("1", "2", "void", "", "x=y", "/usr/bin")

Spec = dict[str, Any]
Case = dict[str, Any]

# The version each feature first appears in, as the reference library's minimum-version check sees it.
MOUNT_TYPE, HOST_PATH, DIGIT_NAME = "0.4.0", "0.5.0", "0.5.0"
ANNOTATIONS, DOTTED_CLASS = "0.6.0", "0.6.0"
INTEL_RDT, GIDS = "0.7.0", "0.7.0"
NET_DEVICES, SCHEMATA = "1.1.0", "1.1.0"


def make_fixtures(root: Path) -> None:
    """The host paths the cases' relative device nodes name, under ``root`` (the working directory)."""
    fx = root / "fx"
    fx.mkdir()
    os.mkfifo(fx / "fifo")
    (fx / "fifo").chmod(0o640)
    (fx / "file").write_text("not a device\n")
    (fx / "file").chmod(0o644)
    (fx / "link").symlink_to("/dev/null")
    (fx / "dir").mkdir()


def at_least(version: str, minimum: str) -> bool:
    return VERSIONS.index(version.removeprefix("v")) >= VERSIONS.index(minimum)


class Generator:
    """One seeded stream of cases."""

    def __init__(self, seed: int = SEED) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - test data, reproducible on purpose
        self.count = 0

    # --- small pieces -------------------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, items: Any) -> Any:
        return self.rng.choice(list(items))

    def env(self) -> list[str]:
        return [f"{self.pick(ENV_KEYS)}={self.pick(ENV_VALUES)}" for _ in range(self.rng.randint(1, 3))]

    def device_node(self, version: str) -> dict[str, Any]:
        # Mostly nodes that apply: a node the host lacks, or of another type, fails the whole inject.
        host = self.pick(HOST_NODES * 10 + FIXTURE_NODES + ("/dev/gpu9",))
        node: dict[str, Any] = {}
        if at_least(version, HOST_PATH) and self.chance(0.5):
            node["path"] = self.pick(("/dev/gpu0", "/dev/gpu1", "/dev/nvidiactl", host))
            node["hostPath"] = host
        else:
            node["path"] = host
        if self.chance(0.5):
            node["type"] = self.pick(("c", "c", "c", "c", "c", "b", "u", "p", ""))
        if self.chance(0.8 if node.get("type") in ("b", "u") else 0.35):
            node["major"] = self.pick((1, 195, 10, -1, 0))
        if self.chance(0.35):
            node["minor"] = self.pick((0, 3, 5, 255))
        if self.chance(0.3):
            node["fileMode"] = self.pick((0o666, 0o600, 0, 0o4755, 0o640))
        if self.chance(0.4):
            node["permissions"] = self.pick(("", "r", "rw", "rwm", "mw", "rrw", "m"))
        if self.chance(0.2):
            node["uid"] = self.pick((0, 1000, 4294967295))
        if self.chance(0.2):
            node["gid"] = self.pick((0, 44, 1000))
        return node

    def mount(self, version: str) -> dict[str, Any]:
        mount: dict[str, Any] = {
            "hostPath": self.pick(("/usr/lib/libx.so.1", "/opt/a", "fx/file", "/etc/b", "/run/s.sock")),
            "containerPath": self.pick(
                ("/usr/lib/libx.so.1", "/a", "/a/b", "/a/b/c", "/opt", "//x/./y/", "rel/p", "/a/../b", "/")
            ),
        }
        if self.chance(0.6):
            mount["options"] = self.pick(
                (["ro", "bind"], ["rbind", "nosuid"], ["ro"], ["nodev", "bind", "ro"])
            )
        if at_least(version, MOUNT_TYPE) and self.chance(0.4):
            mount["type"] = self.pick(("bind", "tmpfs", "none"))
        return mount

    def hook(self) -> dict[str, Any]:
        hook: dict[str, Any] = {
            "hookName": self.pick(HOOK_NAMES),
            "path": self.pick(("/usr/bin/hook", "/bin/true", "rel/hook")),
        }
        if self.chance(0.6):
            hook["args"] = self.pick((["hook", "a"], ["hook"], ["/usr/bin/hook", "-x", "--y=1"]))
        if self.chance(0.4):
            hook["env"] = self.pick((["X=1"], ["PATH=/bin", "X="], ["LD_PRELOAD="]))
        if self.chance(0.4):
            hook["timeout"] = self.pick((0, 5, 30, -1))
        return hook

    def intel_rdt(self, version: str) -> dict[str, Any]:
        rdt: dict[str, Any] = {}
        if self.chance(0.7):
            rdt["closID"] = self.pick(("/", "clos1", "gpu", ""))
        if self.chance(0.4):
            rdt["l3CacheSchema"] = "L3:0=ff"
        if self.chance(0.4):
            rdt["memBwSchema"] = "MB:0=50"
        if at_least(version, SCHEMATA):
            if self.chance(0.4):
                rdt["schemata"] = self.pick((["L3:0=f"], [], ["L3:0=f", "MB:0=20"]))
            if self.chance(0.3):
                rdt["enableMonitoring"] = self.pick((True, False))
        return rdt

    def net_devices(self) -> list[dict[str, str]]:
        hosts = self.rng.sample(["eth0", "eth1", "ib0", "enp1s0"], self.rng.randint(1, 2))
        names = self.rng.sample(["net0", "net1", "eth0", ""], len(hosts))
        return [{"hostInterfaceName": h, "name": n or "ctr0"} for h, n in zip(hosts, names, strict=True)]

    def edits(self, version: str, *, kinds: int | None = None) -> dict[str, Any]:
        """A containerEdits block with 1 to 3 kinds of edit, of those ``version`` allows."""
        allowed = ["env", "deviceNodes", "deviceNodes", "mounts", "hooks"]
        if at_least(version, INTEL_RDT):
            allowed += ["intelRdt", "additionalGids"]
        if at_least(version, NET_DEVICES):
            allowed += ["netDevices"]
        edits: dict[str, Any] = {}
        for kind in self.rng.sample(allowed, min(len(allowed), kinds or self.pick((1, 1, 2, 2, 3)))):
            if kind == "env":
                edits["env"] = self.env()
            elif kind == "deviceNodes":
                edits["deviceNodes"] = [self.device_node(version) for _ in range(self.rng.randint(1, 2))]
            elif kind == "mounts":
                edits["mounts"] = [self.mount(version) for _ in range(self.rng.randint(1, 2))]
            elif kind == "hooks":
                edits["hooks"] = [self.hook() for _ in range(self.rng.randint(1, 2))]
            elif kind == "intelRdt":
                edits["intelRdt"] = self.intel_rdt(version)
            elif kind == "additionalGids":
                edits["additionalGids"] = self.rng.sample([0, 44, 100, 1000, 5], self.rng.randint(1, 3))
            else:
                edits["netDevices"] = self.net_devices()
        return edits

    def kind(self, version: str) -> str:
        classes = CLASSES + (("class.sub",) if at_least(version, DOTTED_CLASS) else ())
        return f"{self.pick(VENDORS)}/{self.pick(classes)}"

    def names(self, version: str, count: int) -> list[str]:
        pool = list(NAMES) + (["0", "1", "2"] if at_least(version, DIGIT_NAME) else [])
        return self.rng.sample(pool, count)

    def spec(
        self, version: str | None = None, kind: str | None = None, names: list[str] | None = None
    ) -> Spec:
        version = version or self.pick(VERSIONS)
        names = names or self.names(version, self.rng.randint(1, 3))
        spec: Spec = {"cdiVersion": version, "kind": kind or self.kind(version)}
        if at_least(version, ANNOTATIONS) and self.chance(0.2):
            spec["annotations"] = {"vendor.com/key": "v", "a": "b"}
        spec["devices"] = []
        for name in names:
            device: dict[str, Any] = {"name": name}
            if at_least(version, ANNOTATIONS) and self.chance(0.1):
                device["annotations"] = {"k": "v"}
            device["containerEdits"] = self.edits(version)
            spec["devices"].append(device)
        if self.chance(0.5):
            spec["containerEdits"] = self.edits(version)
        if self.chance(0.1):
            spec["cdiVersion"] = "v" + version
        return spec

    def render(self, spec: Spec) -> tuple[str, str]:
        """(text, extension): YAML block or flow style, or JSON; now and then in a file of the other kind."""
        style = self.pick(("yaml", "flow", "flow", "flow", "json", "json", "json", "json-indent"))
        if style == "yaml":
            text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False)
        elif style == "flow":
            text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=None, width=1000)
        else:
            text = json.dumps(spec, indent=2 if style == "json-indent" else None) + "\n"
        ext = ".json" if style.startswith("json") else ".yaml"
        if self.chance(0.05):
            ext = ".yaml" if ext == ".json" else ".json"
        return text, ext

    # --- configs ------------------------------------------------------------------------------

    def config(self, specs: list[Spec]) -> dict[str, Any]:
        """An OCI config, some of whose entries are those the specs' edits would add."""
        pool = _edit_pool(specs)
        config: dict[str, Any] = {"ociVersion": "1.2.0"}
        if self.chance(0.85):
            process: dict[str, Any] = {
                "user": {"uid": self.pick((0, 0, 1000)), "gid": self.pick((0, 0, 100))},
                "cwd": "/",
            }
            if self.chance(0.8):
                env = ["PATH=/usr/bin:/bin", *self.env()]
                env += self.rng.sample(pool["env"], min(len(pool["env"]), self.rng.randint(0, 2)))
                if self.chance(0.1):
                    env.append(self.pick(ENV_KEYS))  # an entry without "="
                process["env"] = env
            if self.chance(0.2):
                process["user"]["additionalGids"] = self.rng.sample([44, 5, 1000], 2)
            config["process"] = process
        if self.chance(0.5):
            config["root"] = {"path": "rootfs"}
        if self.chance(0.7):
            extra: list[dict[str, Any]] = [
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]},
                {"destination": "/a/b", "source": "/host/ab", "options": ["bind"]},
                {"destination": "/opt", "source": "/host/opt"},
            ]
            mounts = [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                *extra[: self.rng.randint(0, 3)],
            ]
            mounts += [_oci_mount(m) for m in self.rng.sample(pool["mounts"], min(len(pool["mounts"]), 2))]
            if self.chance(0.05):
                mounts.append({"source": "/nowhere", "options": ["bind"]})  # no destination
            self.rng.shuffle(mounts)
            config["mounts"] = mounts
        if self.chance(0.35) and pool["hooks"]:
            hooks: dict[str, list[Any]] = {}
            for hook in self.rng.sample(pool["hooks"], min(len(pool["hooks"]), 2)):
                hooks.setdefault(hook["hookName"], []).append(_oci_hook(hook))
            if self.chance(0.3):
                hooks.setdefault("prestart", []).append({"path": "/usr/bin/other"})
            config["hooks"] = hooks
        if self.chance(0.85):
            config["linux"] = self.linux(pool)
        return config

    def linux(self, pool: dict[str, list[Any]]) -> dict[str, Any]:
        linux: dict[str, Any] = {}
        devices = []
        for node in self.rng.sample(pool["deviceNodes"], min(len(pool["deviceNodes"]), 2)):
            devices.append({"path": node["path"], "type": "c", "major": 1, "minor": 3, "fileMode": 438})
        if self.chance(0.3):
            devices.append({"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229})
        if devices:
            linux["devices"] = devices
        rules: list[dict[str, Any]] = []
        if self.chance(0.7):
            rules.append({"allow": False, "access": "rwm"})
        if self.chance(0.4):
            rules.append({"allow": True, "type": "c", "major": 1, "minor": 3, "access": "rwm"})
        if self.chance(0.15):
            rules.append({"allow": False, "access": "rwm"})  # a deny after an allow: order decides
        if rules or self.chance(0.2):
            linux["resources"] = {"devices": rules} if rules else {"memory": {"limit": 1 << 30}}
        if self.chance(0.3):
            linux["namespaces"] = [{"type": "mount"}, {"type": "pid"}]
        if self.chance(0.1):
            linux["netDevices"] = {"eth0": {"name": "old0"}}
        if self.chance(0.1):
            linux["intelRdt"] = {"closID": "old", "l3CacheSchema": "L3:0=1"}
        return linux

    def requests(self, specs: list[Spec], extra: tuple[str, ...] = ()) -> list[str]:
        """Qualified names from ``specs``: usually defined ones, now and then repeated or unknown."""
        defined = [
            f"{s['kind']}={d['name']}" for s in specs for d in s.get("devices") or () if isinstance(d, dict)
        ]
        pool = [name for name in defined if isinstance(name, str)] + list(extra)
        if not pool:
            return ["vendor.com/gpu=0"]
        wanted = self.rng.sample(pool, min(len(pool), self.rng.randint(1, 3)))
        if self.chance(0.08):
            wanted.append(self.pick(wanted))
        if self.chance(0.05):
            wanted.append(self.pick(("vendor.com/gpu=nope", "gpu0", "nvidia.com/gpu=all")))
        return wanted

    # --- families -----------------------------------------------------------------------------

    def case(self, family: str, dirs: list[dict[str, str] | None], config: Any, devices: list[str]) -> Case:
        self.count += 1
        return {
            "id": f"{family}-{self.count:04d}",
            "family": family,
            "dirs": dirs,
            "config": config,
            "devices": devices,
        }

    def valid(self) -> Case:
        """One dir, one to three valid specs of any version, some requested."""
        specs = []
        kinds: set[str] = set()
        files: dict[str, str] = {}
        for i in range(self.rng.randint(1, 3)):
            version = self.pick(VERSIONS)
            kind = self.kind(version)
            if kind in kinds:
                continue
            kinds.add(kind)
            spec = self.spec(version, kind)
            specs.append(spec)
            text, ext = self.render(spec)
            files[f"spec{i}{ext}"] = text
        return self.case("valid", [files], self.config(specs), self.requests(specs))

    def version(self) -> Case:
        """A spec using one feature, declared at a version around the one the feature needs; hostPath
        and mount types in a device other than the last (the reference checks only the last device)."""
        feature = self.pick(
            (
                "hostPath",
                "mountType",
                "digitName",
                "annotations",
                "dottedClass",
                "intelRdt",
                "gids",
                "netDevices",
                "schemata",
                "monitoring",
                "none",
            )
        )
        declared = self.pick((*VERSIONS, "0.1.0", "0.2.0", "v0.5.0", "1.2.0", "0.5.1", ""))
        if feature in ("hostPath", "mountType") and self.chance(0.6):
            declared = self.pick(("0.3.0", "v0.3.0", "0.4.0"))  # where the last-device check matters
        spec = self.spec("1.1.0", names=self.names("0.3.0", self.rng.randint(1, 3)), kind="vendor.com/gpu")
        spec.pop("annotations", None)
        for device in spec["devices"]:
            device.pop("annotations", None)
            device["containerEdits"] = self.edits("0.3.0")
            for node in device["containerEdits"].get("deviceNodes", ()):
                node.pop("hostPath", None)
        spec["containerEdits"] = self.edits("0.3.0") if self.chance(0.3) else {}
        if not spec["containerEdits"]:
            spec.pop("containerEdits")
        spec["cdiVersion"] = declared
        where = (
            self.pick(spec["devices"][:-1] or spec["devices"])
            if self.chance(0.6)
            else self.pick(spec["devices"])
        )
        edits = where["containerEdits"]
        if feature == "hostPath":
            edits.setdefault("deviceNodes", []).append({"path": "/dev/gpu0", "hostPath": "/dev/null"})
        elif feature == "mountType":
            edits.setdefault("mounts", []).append({"hostPath": "/a", "containerPath": "/b", "type": "bind"})
        elif feature == "digitName":
            where["name"] = self.pick(("0", "1x", "9.a"))
        elif feature == "annotations":
            (where if self.chance(0.5) else spec)["annotations"] = {"a": "b"}
        elif feature == "dottedClass":
            spec["kind"] = "vendor.com/class.sub"
        elif feature == "intelRdt":
            edits["intelRdt"] = self.pick(({}, {"closID": "x"}))
        elif feature == "gids":
            edits["additionalGids"] = self.pick(([0], [44]))
        elif feature == "netDevices":
            edits["netDevices"] = [{"hostInterfaceName": "eth0", "name": "n0"}]
        elif feature == "schemata":
            edits["intelRdt"] = {"schemata": self.pick(([], ["L3:0=f"]))}
        elif feature == "monitoring":
            edits["intelRdt"] = {"enableMonitoring": self.pick((True, False))}
        text, ext = self.render(spec)
        return self.case("version", [{f"v{ext}": text}], self.config([spec]), self.requests([spec]))

    def invalid(self) -> Case:
        """A valid spec with one mutation (of its data or of its text), now and then beside a good one."""
        version = self.pick(VERSIONS)
        spec = self.spec(version, kind="vendor.com/gpu")
        name, mutate = self.pick(MUTATIONS)
        text, ext = mutate(self, spec)
        files = {f"bad{ext}": text}
        specs = [spec]
        if self.chance(0.3):
            good = self.spec(kind="example.org/net")
            specs.append(good)
            good_text, good_ext = self.render(good)
            files[f"good{good_ext}"] = good_text
        case = self.case("invalid", [files], self.config(specs), self.requests(specs))
        case["mutation"] = name
        return case

    def dirs(self) -> Case:
        """Two or three spec dirs (one may not exist) whose specs define some of the same devices, with
        files that are not specs beside them."""
        dirs: list[dict[str, str] | None] = []
        specs = []
        names = ["gpu0", "gpu1", "a"]
        for _ in range(self.rng.randint(2, 3)):
            if self.chance(0.12):
                dirs.append(None)
                continue
            files: dict[str, str] = {}
            for j in range(self.rng.randint(1, 3)):
                version = self.pick(VERSIONS)
                kind = self.pick(("vendor.com/gpu", "vendor.com/gpu", "example.org/net"))
                spec = self.spec(version, kind, self.rng.sample(names, self.rng.randint(1, 2)))
                specs.append(spec)
                text, ext = self.render(spec)
                files[f"{'ab'[j % 2]}{j}{ext}"] = text
            if self.chance(0.3):
                junk = self.render(self.spec(kind="vendor.com/gpu", names=["gpu2"]))[0]
                files[self.pick(("c.yml", "notes.txt", "sub/d.yaml", ".hidden.yaml", "noext"))] = junk
            dirs.append(files)
        return self.case("dirs", dirs, self.config(specs), self.requests(specs))

    def inject(self) -> Case:
        """One or two specs and a config that holds many of their edits already."""
        specs = [self.spec(self.pick(VERSIONS[3:]), "vendor.com/gpu")]
        if self.chance(0.4):
            specs.append(self.spec(self.pick(VERSIONS), "example.org/net"))
        files = {}
        for i, spec in enumerate(specs):
            text, ext = self.render(spec)
            files[f"s{i}{ext}"] = text
        config = self.config(specs)
        for _ in range(1):  # more overlap than a random config has
            config = _merge_overlap(config, self.config(specs))
        return self.case("inject", [files], config, self.requests(specs))


def _edit_pool(specs: list[Spec]) -> dict[str, list[Any]]:
    pool: dict[str, list[Any]] = {"env": [], "deviceNodes": [], "mounts": [], "hooks": []}
    for spec in specs:
        blocks = [spec.get("containerEdits") or {}] + [
            d.get("containerEdits") or {} for d in spec.get("devices") or () if isinstance(d, dict)
        ]
        for block in blocks:
            if not isinstance(block, dict):
                continue
            for key in pool:
                items = block.get(key) or []
                pool[key] += [item for item in items if isinstance(items, list) and _copyable(item)]
    return pool


def _copyable(item: Any) -> bool:
    """Whether an edit can go into an OCI config as it is (mutated specs hold ints for strings)."""
    if isinstance(item, str):
        return True
    if not isinstance(item, dict):
        return False
    texts = ("path", "hookName", "hostPath", "containerPath", "type")
    lists = ("args", "env", "options")
    return (
        all(isinstance(item.get(key, ""), str) for key in texts)
        and all(isinstance(v, str) for key in lists for v in item.get(key) or ())
        and type(item.get("timeout", 0)) is int
    )


def _merge_overlap(config: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(config)
    env = (other.get("process") or {}).get("env")
    if env and "process" in merged:
        merged["process"].setdefault("env", []).extend(env[1:])
    for key in ("mounts",):
        if key in other:
            merged.setdefault(key, []).extend(m for m in other[key] if m not in merged.get(key, []))
    for stage, hooks in (other.get("hooks") or {}).items():
        merged.setdefault("hooks", {}).setdefault(stage, []).extend(hooks)
    return merged


def _oci_mount(mount: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"destination": mount.get("containerPath", "")}
    if mount.get("type"):
        entry["type"] = mount["type"]
    entry["source"] = mount.get("hostPath", "")
    if mount.get("options"):
        entry["options"] = list(mount["options"])
    return entry


def _oci_hook(hook: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": hook.get("path", "")}
    for key in ("args", "env"):
        if hook.get(key):
            entry[key] = list(hook[key])
    if hook.get("timeout") is not None:
        entry["timeout"] = hook["timeout"]
    return entry


# --- mutations: (name, function of a valid spec -> (text, extension)) --------------------------------

Mutation = Callable[[Generator, Spec], tuple[str, str]]


def _data(change: Callable[[Generator, Spec], None]) -> Mutation:
    """A mutation of the spec's data, rendered as any other spec."""

    def mutate(gen: Generator, spec: Spec) -> tuple[str, str]:
        change(gen, spec)
        return gen.render(spec)

    return mutate


def _yaml(change: Callable[[Generator, str], str]) -> Mutation:
    """A mutation of the spec's YAML text."""

    def mutate(gen: Generator, spec: Spec) -> tuple[str, str]:
        text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False)
        return change(gen, text), ".yaml"

    return mutate


def _first_edits(spec: Spec) -> dict[str, Any]:
    return spec["devices"][0]["containerEdits"]  # type: ignore[no-any-return]


def _set(*path: Any, value: Any) -> Callable[[Generator, Spec], None]:
    def change(_gen: Generator, spec: Spec) -> None:
        target: Any = spec
        for key in path[:-1]:
            target = target.setdefault(key, {}) if isinstance(key, str) else target[key]
        target[path[-1]] = value

    return change


def _edit(key: str, value: Any) -> Callable[[Generator, Spec], None]:
    def change(_gen: Generator, spec: Spec) -> None:
        _first_edits(spec)[key] = value

    return change


def _item(key: str, base: dict[str, Any], **fields: Any) -> Callable[[Generator, Spec], None]:
    """Put ``base`` with ``fields`` changed into the first device's ``key`` list."""

    def change(_gen: Generator, spec: Spec) -> None:
        _first_edits(spec).setdefault(key, []).append({**base, **fields})

    return change


NODE = {"path": "/dev/null"}
MOUNT = {"hostPath": "/a", "containerPath": "/b"}
HOOK = {"hookName": "createContainer", "path": "/bin/h"}


def _replace_once(old: str, new: str) -> Callable[[Generator, str], str]:
    return lambda _gen, text: text.replace(old, new, 1)


def _anchor_in_place(_gen: Generator, spec: Spec) -> tuple[str, str]:
    spec.pop("containerEdits", None)
    text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False)
    return text + "containerEdits:\n  env: &e\n  - A=1\n  additionalGids: []\n", ".yaml"


def _alias(_gen: Generator, spec: Spec) -> tuple[str, str]:
    name = spec["devices"][0]["name"]
    text = f"cdiVersion: 0.3.0\nkind: vendor.com/gpu\ndevices:\n- name: {json.dumps(name)}\n  containerEdits: &e\n    env: [A=1]\n"
    return text + "- name: other\n  containerEdits: *e\n", ".yaml"


def _multi(second: str) -> Mutation:
    def mutate(gen: Generator, spec: Spec) -> tuple[str, str]:
        text = yaml.safe_dump(spec, sort_keys=False, default_flow_style=False)
        return text + second, ".yaml"

    return mutate


def _empty_first(_gen: Generator, spec: Spec) -> tuple[str, str]:
    return "---\n---\n" + yaml.safe_dump(spec, sort_keys=False), ".yaml"


def _json_text(change: Callable[[str], str], ext: str = ".json") -> Mutation:
    def mutate(_gen: Generator, spec: Spec) -> tuple[str, str]:
        return change(json.dumps(spec, indent=2)), ext

    return mutate


def _scalar_line(field: str, raw: str) -> Mutation:
    """The first device's ``field`` written as the raw YAML scalar ``raw`` (a float, a date, a tag)."""

    def mutate(_gen: Generator, spec: Spec) -> tuple[str, str]:
        devices = spec.pop("devices")
        spec.pop("containerEdits", None)
        head = yaml.safe_dump(spec, sort_keys=False)
        if field == "name":
            return head + f"devices:\n- name: {raw}\n  containerEdits:\n    env: [A=1]\n", ".yaml"
        body = yaml.safe_dump(devices[1:], sort_keys=False) if len(devices) > 1 else ""
        node = {"path": "/dev/null", "type": "c"}
        first = yaml.safe_dump(
            [{"name": devices[0]["name"], "containerEdits": {"deviceNodes": [node]}}], sort_keys=False
        )
        first = first.rstrip("\n") + f"\n      {field}: {raw}\n"
        return head + "devices:\n" + first + body, ".yaml"

    return mutate


MUTATIONS: list[tuple[str, Mutation]] = [
    ("unknown-top", _data(_set("xyzzy", value="garbled"))),
    ("unknown-device", _data(lambda g, s: s["devices"][0].update(extra=1))),
    ("unknown-edits", _data(_edit("devicenodes", [NODE]))),
    ("unknown-node", _data(_item("deviceNodes", NODE, hostpath="/dev/null"))),
    ("removed-enableCMT", _data(_edit("intelRdt", {"enableCMT": True}))),
    ("kind-no-slash", _data(_set("kind", value="vendor.comgpu"))),
    ("kind-empty", _data(_set("kind", value=""))),
    ("kind-no-class", _data(_set("kind", value="vendor.com/"))),
    ("kind-no-vendor", _data(_set("kind", value="/gpu"))),
    ("kind-space", _data(_set("kind", value="ven dor.com/gpu"))),
    ("kind-dash-end", _data(_set("kind", value="vendor.com-/gpu"))),
    ("kind-underscore-start", _data(_set("kind", value="_v.com/gpu"))),
    ("kind-one-char-vendor", _data(_set("kind", value="a/gpu"))),
    ("kind-one-char-class", _data(_set("kind", value="vendor.com/g"))),
    ("kind-equals", _data(_set("kind", value="vendor.com/gpu="))),
    ("kind-two-slashes", _data(_set("kind", value="vendor.com/a/b"))),
    ("kind-underscore-vendor", _data(_set("kind", value="my_vendor.com/gpu"))),
    ("kind-long-vendor", _data(_set("kind", value="v" * 300 + ".com/gpu"))),
    ("kind-int", _data(_set("kind", value=5))),
    ("version-empty", _data(_set("cdiVersion", value=""))),
    ("version-old", _data(lambda g, s: s.update(cdiVersion=g.pick(("0.1.0", "0.2.0", "v0.2.0"))))),
    (
        "version-unknown",
        _data(lambda g, s: s.update(cdiVersion=g.pick(("1.2.0", "0.5.1", "not-a-version", "2.0.0")))),
    ),
    ("version-float", _yaml(lambda g, t: t.replace("cdiVersion: ", "cdiVersion: 0.5 #", 1))),
    ("name-empty", _data(_set("devices", 0, "name", value=""))),
    (
        "name-bad",
        _data(lambda g, s: s["devices"][0].update(name=g.pick(("-a", "a-", "a b", "a/b", "a=b", "_a")))),
    ),
    ("name-colon", _data(_set("devices", 0, "name", value="a:b"))),
    ("name-digit", _data(_set("devices", 0, "name", value="0abc"))),
    ("name-int", _data(_set("devices", 0, "name", value=7))),
    (
        "name-bool",
        _yaml(lambda g, t: t.replace("- name: ", f"- name: {g.pick(('yes', 'on', 'y', 'No', 'off'))} #", 1)),
    ),
    ("name-duplicate", _data(lambda g, s: s["devices"].append(copy.deepcopy(s["devices"][0])))),
    ("no-devices", _data(_set("devices", value=[]))),
    ("devices-missing", _data(lambda g, s: s.pop("devices"))),
    ("devices-null", _data(_set("devices", value=None))),
    ("devices-map", _data(_set("devices", value={"name": "x"}))),
    ("device-null", _data(lambda g, s: s["devices"].append(None))),
    ("edits-empty", _data(_set("devices", 0, "containerEdits", value={}))),
    ("edits-missing", _data(lambda g, s: s["devices"][0].pop("containerEdits"))),
    ("edits-list", _data(_set("devices", 0, "containerEdits", value=[]))),
    ("env-bad", _data(lambda g, s: _first_edits(s).update(env=[g.pick(("", "=x", "NOEQ", 1, True))]))),
    ("env-empty-value", _data(_edit("env", ["A="]))),
    ("env-string", _data(_edit("env", "A=1"))),
    ("env-null-item", _data(_edit("env", ["A=1", None]))),
    ("node-empty-path", _data(_item("deviceNodes", NODE, path=""))),
    ("node-bad-type", _data(lambda g, s: _item("deviceNodes", NODE, type=g.pick(("x", "f", "C")))(g, s))),
    (
        "node-bad-perm",
        _data(lambda g, s: _item("deviceNodes", NODE, permissions=g.pick(("rwx", "none", "RW")))(g, s)),
    ),
    ("node-major-string", _data(_item("deviceNodes", NODE, major="10"))),
    (
        "node-major-float",
        _data(lambda g, s: _item("deviceNodes", NODE, type="c", major=g.pick((1.0, 195.0, 1.5, 1e3)))(g, s)),
    ),
    ("node-uid-range", _data(lambda g, s: _item("deviceNodes", NODE, uid=g.pick((-1, 4294967296)))(g, s))),
    ("node-gid-float", _data(lambda g, s: _item("deviceNodes", NODE, gid=g.pick((44.0, 0.0, 2.5)))(g, s))),
    ("node-filemode-octal", _scalar_line("fileMode", "0660")),
    ("node-filemode-0o", _scalar_line("fileMode", "0o660")),
    ("node-major-hex", _scalar_line("major", "0x10")),
    ("node-major-underscore", _scalar_line("major", "1_0")),
    ("node-major-big", _scalar_line("major", "9223372036854775808")),
    ("node-major-tag", _scalar_line("major", '!!int "5"')),
    ("node-null", _data(_edit("deviceNodes", [None]))),
    (
        "hook-bad-name",
        _data(lambda g, s: _item("hooks", HOOK, hookName=g.pick(("Prestart", "misCreateRuntime", "")))(g, s)),
    ),
    ("hook-empty-path", _data(_item("hooks", HOOK, path=""))),
    ("hook-bad-env", _data(_item("hooks", HOOK, env=["=v"]))),
    ("hook-timeout-string", _data(_item("hooks", HOOK, timeout="5"))),
    ("hook-timeout-float", _data(lambda g, s: _item("hooks", HOOK, timeout=g.pick((5.0, 0.5)))(g, s))),
    ("hook-args-null", _data(_item("hooks", HOOK, args=["h", None]))),
    ("hook-null", _data(_edit("hooks", [HOOK, None]))),
    ("hook-path-int", _data(_item("hooks", HOOK, path=5))),
    ("mount-empty-host", _data(_item("mounts", MOUNT, hostPath=""))),
    ("mount-empty-container", _data(_item("mounts", MOUNT, containerPath=""))),
    ("mount-options-null", _data(_item("mounts", MOUNT, options=[None, "ro"]))),
    ("mount-null", _data(_edit("mounts", [None]))),
    (
        "rdt-closid",
        _data(lambda g, s: _edit("intelRdt", {"closID": g.pick(("a/b", ".", "..", "a\nb", "/"))})(g, s)),
    ),
    ("rdt-schemata-null", _data(_edit("intelRdt", {"schemata": [None]}))),
    ("gids-negative", _data(_edit("additionalGids", [-1]))),
    ("gids-string", _data(_edit("additionalGids", ["44"]))),
    ("gids-null-item", _data(_edit("additionalGids", [None, 44]))),
    ("gids-float", _data(_edit("additionalGids", [44.0]))),
    (
        "net-empty",
        _data(
            lambda g, s: _edit(
                "netDevices",
                [g.pick(({"hostInterfaceName": "", "name": "a"}, {"hostInterfaceName": "a", "name": ""}))],
            )(g, s)
        ),
    ),
    (
        "net-duplicate",
        _data(
            lambda g, s: _edit(
                "netDevices",
                g.pick(
                    (
                        [{"hostInterfaceName": "e", "name": "a"}, {"hostInterfaceName": "e", "name": "b"}],
                        [{"hostInterfaceName": "e", "name": "a"}, {"hostInterfaceName": "f", "name": "a"}],
                    )
                ),
            )(g, s)
        ),
    ),
    ("net-null", _data(_edit("netDevices", [None]))),
    ("annotations-int", _data(_set("annotations", value={"a": 1}))),
    ("annotations-null-value", _data(_set("annotations", value={"a": None}))),
    ("annotations-nested", _data(_set("annotations", value={"a": {"b": "c"}}))),
    ("annotations-bad-key", _data(_set("annotations", value={"-bad key-": "v"}))),
    ("case-version", _yaml(_replace_once("cdiVersion:", "CDIVersion:"))),
    ("case-edits", _yaml(_replace_once("containerEdits:", "ContainerEdits:"))),
    (
        "case-field",
        _yaml(lambda g, t: t.replace("path:", "Path:", 1) if "path:" in t else t.replace("env:", "Env:", 1)),
    ),
    ("duplicate-key", _yaml(lambda g, t: t + "kind: other.com/gpu\n")),
    ("anchor-unused", _anchor_in_place),
    ("alias", _alias),
    (
        "multi-doc-spec",
        _multi(
            "---\ncdiVersion: 0.3.0\nkind: other.com/x\ndevices: [{name: z, containerEdits: {env: [Z=1]}}]\n"
        ),
    ),
    ("multi-doc-garbage", _multi("---\nfoo: [\n")),
    ("multi-doc-end", _multi("...\n%%%%\n")),
    ("multi-doc-empty", _multi("---\n")),
    ("multi-doc-empty-first", _empty_first),
    ("empty-file", lambda g, s: (g.pick(("", "\n", "# nothing\n")), ".yaml")),
    ("null-document", lambda g, s: (g.pick(("null\n", "~\n", "---\n")), ".yaml")),
    (
        "not-a-mapping",
        lambda g, s: (g.pick(("[]\n", "foo\n", "5\n", "[a, b]\n")), g.pick((".yaml", ".json"))),
    ),
    ("yaml-syntax", _yaml(lambda g, t: t + "  bad: [\n")),
    ("yaml-tab", _yaml(lambda g, t: t.replace("\n  ", "\n\t", 1))),
    ("yaml-bom", _yaml(lambda g, t: "\ufeff" + t)),
    ("yaml-comment", _yaml(lambda g, t: "# a comment\n" + t.replace("\n", "  # trailing\n", 1))),
    ("yaml-in-json-file", _yaml(lambda g, t: t)),
    ("json-trailing-comma", _json_text(lambda t: t.rstrip().rstrip("}") + ",}")),
    ("json-single-quotes", _json_text(lambda t: t.replace('"cdiVersion"', "'cdiVersion'", 1))),
    ("json-comment", _json_text(lambda t: t.replace("{", "{ # comment\n", 1))),
    ("json-duplicate-key", _json_text(lambda t: t.replace("{", '{"kind": "x.com/y", ', 1))),
    ("json-in-yaml-file", _json_text(lambda t: t, ".yaml")),
    ("name-float", _scalar_line("name", "1.0")),
    ("name-date", _scalar_line("name", "2020-01-01")),
    ("name-str-tag", _scalar_line("name", "!!str 12")),
    ("name-custom-tag", _scalar_line("name", "!custom x")),
    ("name-binary-tag", _scalar_line("name", "!!binary aGk=")),
    ("name-sexagesimal", _scalar_line("name", "1:20")),
    ("name-tilde", _scalar_line("name", "~")),
    ("complex-key", _yaml(lambda g, t: t + "? [a, b]\n: c\n")),
]


def cases() -> Iterator[Case]:
    """The corpus's inputs, seeded: the same list on every run."""
    gen = Generator()
    plan = [("valid", 700), ("version", 300), ("invalid", 500), ("dirs", 300), ("inject", 550)]
    for family, count in plan:
        make = getattr(gen, family)
        for _ in range(count):
            yield make()
    # Every mutation at least twice, whatever the draws gave.
    for name, mutate in MUTATIONS:
        for _ in range(2):
            spec = gen.spec(gen.pick(VERSIONS), kind="vendor.com/gpu")
            text, ext = mutate(gen, spec)
            case = gen.case("invalid", [{f"bad{ext}": text}], gen.config([spec]), gen.requests([spec]))
            case["mutation"] = name
            yield case


def reapply_cases(outcomes: list[tuple[Case, dict[str, Any]]], count: int = 150) -> Iterator[Case]:
    """Cases that inject again what the reference injected: its output config as the input."""
    rng = random.Random(SEED + 1)  # noqa: S311
    done = [(case, ref) for case, ref in outcomes if ref.get("config_out") is not None]
    for i, (case, ref) in enumerate(rng.sample(done, min(count, len(done)))):
        yield {
            "id": f"reapply-{i + 1:04d}",
            "family": "reapply",
            "dirs": case["dirs"],
            "config": ref["config_out"],
            "devices": case["devices"],
            "again": case["id"],
        }
