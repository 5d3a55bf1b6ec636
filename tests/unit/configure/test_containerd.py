"""containerd config edits: versions 1-3, drop-in and in place, shapes of real configs, removal."""

from __future__ import annotations

import json
import tomllib

import pytest

from cdictk.configure.change import RuntimeChange
from cdictk.configure.containerd import (
    CRI_PLUGINS,
    config_version,
    configure_drop_in,
    configure_in_place,
)
from cdictk.startpath.helpers.errors import CdictkError

DROP_IN = "/etc/containerd/conf.d/99-cdictk.toml"
PATH = "/usr/local/bin/cdictk-runtime"
CHANGE = RuntimeChange(set_as_default=True, enable_cdi=True, cdi_spec_dirs=("/etc/cdi", "/var/run/cdi"))

# Shaped like `containerd config default` output after a few hand edits (comments, indentation).
V2 = """# managed by hand: keep this comment
version = 2
root = "/var/lib/containerd"  # and this one
imports = ["/etc/containerd/extra.toml"]

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
"""


def drop_in(
    text: str, change: RuntimeChange = CHANGE, current: str | None = None
) -> tuple[str | None, str | None]:
    main, drop = configure_drop_in(
        text,
        "/etc/containerd/config.toml",
        drop_in=DROP_IN,
        drop_in_text=current,
        change=change,
        installed=None,
    )
    assert main.path == "/etc/containerd/config.toml" and drop.path == DROP_IN
    return main.text, drop.text


def test_drop_in_appends_to_imports_and_carries_the_whole_cri_table() -> None:
    main, drop = drop_in(V2)
    assert main == V2.replace(
        'imports = ["/etc/containerd/extra.toml"]',
        f'imports = ["/etc/containerd/extra.toml", "{DROP_IN}"]',
    )
    assert drop is not None
    data = tomllib.loads(drop)
    cri = data["plugins"]["io.containerd.grpc.v1.cri"]
    assert data["version"] == 2
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.9"  # 1.6 would lose it otherwise
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert cri["containerd"]["default_runtime_name"] == "cdictk"
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": True}
    assert cri["containerd"]["runtimes"]["cdictk"] == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True, "BinaryName": PATH},  # copied from the default runtime
        "container_annotations": ["cdi.k8s.io/*"],  # so that a device plugin's reach the shim
    }


def test_second_run_changes_nothing() -> None:
    main, drop = drop_in(V2)
    assert main is not None and drop is not None
    again_main, again_drop = drop_in(main, current=drop)
    assert again_main is main and again_drop is drop  # the same text objects: nothing to write


def test_removal_restores_the_main_file_byte_for_byte_and_drops_the_drop_in() -> None:
    main, drop = drop_in(V2)
    assert main is not None
    # --remove takes CDI settings out only when asked: CDI may serve other runtimes.
    kept_cdi, still = drop_in(main, RuntimeChange(remove=True), current=drop)
    assert kept_cdi is main and still is not None and "enable_cdi = true" in still and "cdictk]" not in still
    undo = RuntimeChange(remove=True, enable_cdi=True, cdi_spec_dirs=CHANGE.cdi_spec_dirs)
    restored, gone = drop_in(main, undo, current=drop)
    assert restored == V2 and gone is None


def test_an_import_glob_that_covers_the_drop_in_is_not_repeated() -> None:
    text = 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    main, _ = drop_in(text)
    assert main == text


def test_empty_config_gets_version_imports_and_runc() -> None:
    main, drop = drop_in("", RuntimeChange())
    assert main == f'version = 2\nimports = ["{DROP_IN}"]\n'
    assert drop is not None
    runtimes = tomllib.loads(drop)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    # containerd 1.6 drops its built-in runc once a config names any runtime.
    assert runtimes == {
        "runc": {"runtime_type": "io.containerd.runc.v2"},
        "cdictk": {
            "runtime_type": "io.containerd.runc.v2",
            "options": {"BinaryName": PATH},
            "container_annotations": ["cdi.k8s.io/*"],
        },
    }


def test_version_3_uses_the_containerd_2_plugin() -> None:
    text = 'version = 3\n\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
    _, drop = drop_in(text)
    assert drop is not None
    cri = tomllib.loads(drop)["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["enable_cdi"] is True and "cdictk" in cri["containerd"]["runtimes"]
    empty_v3, _ = configure_drop_in(
        "", "c.toml", drop_in=DROP_IN, drop_in_text=None, change=RuntimeChange(), installed=3
    )
    assert empty_v3.text is not None and empty_v3.text.startswith("version = 3\n")


def test_version_1_is_edited_in_place_with_enable_cdi_in_the_cri_table() -> None:
    text = '[plugins.cri]\n  sandbox_image = "x"\n[plugins.cri.containerd]\n  snapshotter = "overlayfs"\n'
    with pytest.raises(CdictkError, match="config version 1 has no imports"):
        drop_in(text)
    edited = configure_in_place(text, "c.toml", CHANGE, None).text
    assert edited is not None
    cri = tomllib.loads(edited)["plugins"]["cri"]
    # NVIDIA's tool puts it under plugins.cri.containerd, where containerd does not read it.
    assert cri["enable_cdi"] is True and "enable_cdi" not in cri["containerd"]
    assert cri["containerd"]["snapshotter"] == "overlayfs"
    assert edited.startswith('[plugins.cri]\n  sandbox_image = "x"\n  enable_cdi = true\n')


def test_in_place_keeps_comments_and_layout_outside_the_changed_tables() -> None:
    edited = configure_in_place(V2, "c.toml", CHANGE, None).text
    assert edited is not None
    head = V2.split("[plugins]", maxsplit=1)[0]
    assert edited.startswith(head)  # comments, root keys, imports: byte for byte
    assert "          SystemdCgroup = true\n" in edited
    data = tomllib.loads(edited)
    assert data["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "cdictk"


@pytest.mark.parametrize(
    "text",
    [
        # dotted keys at the root and an inline table: tomlkit must not move keys around
        'version = 2\nplugins."io.containerd.grpc.v1.cri".sandbox_image = "x"\nroot = "/r"\n',
        'version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = { sandbox_image = "x" }\n',
        'version = 2\r\n# windows line ends\r\n[plugins."io.containerd.grpc.v1.cri"]\r\n  sandbox_image = "x"\r\n',
    ],
)
def test_awkward_shapes_are_edited_correctly_or_refused(text: str) -> None:
    try:
        edited = configure_in_place(text, "c.toml", CHANGE, None).text
    except CdictkError as exc:
        assert "cannot edit this file safely" in str(exc)
        return
    assert edited is not None
    data = tomllib.loads(edited)
    cri = data["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "x" and cri["enable_cdi"] is True
    assert "cdictk" in cri["containerd"]["runtimes"]
    if "\r\n" in text:
        assert "\n" not in edited.replace("\r\n", "")  # no mixed line ends


# Hand-edited layouts that spread the CRI table over the file, each with the exact in-place result
# ({v}: config version, {cri}: its CRI plugin). tomlkit's merged view of such a table could not add a key.
HAND_EDITED = {
    "tables out of order": (
        """# hand edited: runc first, the CRI table's own settings last
version = {v}

[plugins."{cri}".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"  # keep this comment

[plugins."{cri}".registry]
  config_path = "/etc/containerd/certs.d"

[plugins."{cri}".containerd]
  snapshotter = "overlayfs"
""",
        """# hand edited: runc first, the CRI table's own settings last
version = {v}

[plugins."{cri}"]
enable_cdi = true
cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

[plugins."{cri}".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"  # keep this comment

[plugins."{cri}".containerd.runtimes.cdictk]
runtime_type = "io.containerd.runc.v2"
container_annotations = ["cdi.k8s.io/*"]

[plugins."{cri}".containerd.runtimes.cdictk.options]
BinaryName = "/usr/local/bin/cdictk-runtime"

[plugins."{cri}".registry]
  config_path = "/etc/containerd/certs.d"

[plugins."{cri}".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "cdictk"
""",
    ),
    "dotted keys in [plugins]": (
        """version = {v}
# CRI settings as dotted keys
[plugins]
  "{cri}".enable_cdi = false  # off for now
  "{cri}".containerd.snapshotter = "overlayfs"

[debug]
  level = "info"
""",
        """version = {v}
# CRI settings as dotted keys
[plugins]
  "{cri}".enable_cdi = true  # off for now
  "{cri}".cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  "{cri}".containerd.snapshotter = "overlayfs"
  "{cri}".containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
  "{cri}".containerd.runtimes.cdictk.runtime_type = "io.containerd.runc.v2"
  "{cri}".containerd.runtimes.cdictk.options.BinaryName = "/usr/local/bin/cdictk-runtime"
  "{cri}".containerd.runtimes.cdictk.container_annotations = ["cdi.k8s.io/*"]
  "{cri}".containerd.default_runtime_name = "cdictk"

[debug]
  level = "info"
""",
    ),
    # A [header] added here would swallow the root keys after it: new tables are dotted keys too.
    "dotted keys at the root": (
        """version = {v}
plugins."{cri}".enable_cdi = false  # off for now
plugins."{cri}".containerd.default_runtime_name = "runc"
root = "/var/lib/containerd"
""",
        """version = {v}
plugins."{cri}".enable_cdi = true  # off for now
plugins."{cri}".cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
plugins."{cri}".containerd.default_runtime_name = "cdictk"
plugins."{cri}".containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
plugins."{cri}".containerd.runtimes.cdictk.runtime_type = "io.containerd.runc.v2"
plugins."{cri}".containerd.runtimes.cdictk.options.BinaryName = "/usr/local/bin/cdictk-runtime"
plugins."{cri}".containerd.runtimes.cdictk.container_annotations = ["cdi.k8s.io/*"]
root = "/var/lib/containerd"
""",
    ),
    "super-tables after their sub-tables": (
        """version = {v}
# sub-tables first, their super-tables after
[plugins."{cri}".containerd.runtimes.runc.options]
  SystemdCgroup = true

[plugins."{cri}".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."{cri}".containerd]
  default_runtime_name = "runc"

[plugins."{cri}"]
  sandbox_image = "registry.k8s.io/pause:3.9"

[plugins]
""",
        """version = {v}
# sub-tables first, their super-tables after
[plugins."{cri}".containerd.runtimes.runc.options]
  SystemdCgroup = true

[plugins."{cri}".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."{cri}".containerd.runtimes.cdictk]
runtime_type = "io.containerd.runc.v2"
container_annotations = ["cdi.k8s.io/*"]

[plugins."{cri}".containerd.runtimes.cdictk.options]
SystemdCgroup = true
BinaryName = "/usr/local/bin/cdictk-runtime"

[plugins."{cri}".containerd]
  default_runtime_name = "cdictk"

[plugins."{cri}"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]

[plugins]
""",
    ),
}


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("shape", list(HAND_EDITED))
def test_hand_edited_layouts_are_edited_in_place(shape: str, version: int) -> None:
    cri = CRI_PLUGINS[version]
    text, expected = (template.format(v=version, cri=cri) for template in HAND_EDITED[shape])
    edited = configure_in_place(text, "c.toml", CHANGE, None).text
    assert edited == expected  # the user's comments and layout kept; the additions beside their kin
    assert configure_in_place(expected, "c.toml", CHANGE, None).text is expected  # nothing left to do
    undo = RuntimeChange(remove=True, enable_cdi=True, cdi_spec_dirs=CHANGE.cdi_spec_dirs)
    back = configure_in_place(expected, "c.toml", undo, None, tomllib.loads(text)).text
    assert back is not None and tomllib.loads(back) == tomllib.loads(text)
    # With a drop-in the main file only gains the import; the drop-in carries the same CRI table.
    main, drop = drop_in(text)
    assert main is not None and drop is not None
    assert tomllib.loads(main) == {**tomllib.loads(text), "imports": [DROP_IN]}
    assert tomllib.loads(drop)["plugins"][cri] == tomllib.loads(expected)["plugins"][cri]


# Valid TOML that tomlkit 0.15 cannot read: a table's sub-table appended after another table.
UNREADABLE = """# hand-edited
version = 2

# the CRI plugin
[plugins."io.containerd.grpc.v1.cri"]
[plugins."io.containerd.grpc.v1.cri".containerd]
[plugins."io.containerd.grpc.v1.cri".registry]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
[metrics]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""


def test_a_layout_tomlkit_cannot_read_still_takes_the_drop_in() -> None:
    """The main file only gains its import, a line among its top-level values: no table is touched."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    with pytest.raises(TOMLKitError):
        tomlkit.parse(UNREADABLE)  # if tomlkit learns to read it, this test no longer tests the fallback
    main, drop = drop_in(UNREADABLE)
    assert main == UNREADABLE.replace("version = 2\n", f'version = 2\nimports = ["{DROP_IN}"]\n')
    assert (
        drop is not None
        and "cdictk" in tomllib.loads(drop)["plugins"][CRI_PLUGINS[2]]["containerd"]["runtimes"]
    )
    assert drop_in(main, current=drop) == (main, drop)  # nothing left to do
    undo = RuntimeChange(remove=True, enable_cdi=True, cdi_spec_dirs=CHANGE.cdi_spec_dirs)
    assert drop_in(main, undo, current=drop) == (UNREADABLE, None)  # byte for byte
    with pytest.raises(
        CdictkError, match=r"^c.toml:\d+:\d+: cannot edit this file safely \(tomlkit cannot read it"
    ):
        configure_in_place(UNREADABLE, "c.toml", CHANGE, None)  # in place, the CRI table needs a real edit


def test_a_valid_layout_tomlkit_cannot_read_is_refused_not_called_invalid() -> None:
    # tomlkit 0.15.1+ rejects this valid file (a super-table between its sub-tables, then a deeper one).
    text = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n[plugins."io.containerd.grpc.v1.cri"]\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
    )
    try:
        edited = configure_in_place(text, "c.toml", CHANGE, None).text
    except CdictkError as exc:
        assert str(exc).startswith("c.toml:5:1: cannot edit this file safely (tomlkit cannot read it: ")
        assert "invalid" not in str(exc) and "\n" not in str(exc)
        return
    assert edited is not None
    assert "cdictk" in tomllib.loads(edited)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version = 2\n[plugins\n", "c.toml:2:9: invalid TOML"),
        ("version = 9\n", "c.toml: version: unsupported config version 9"),
        ('version = 2\nimports = "x"\n', "c.toml: imports: is not a list of paths"),
        (
            'version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = 5\n',
            'plugins."io.containerd.grpc.v1.cri": is not a table',
        ),
    ],
)
def test_bad_configs(text: str, message: str) -> None:
    with pytest.raises(CdictkError) as caught:
        configure_drop_in(text, "c.toml", drop_in=DROP_IN, drop_in_text=None, change=CHANGE, installed=None)
    assert message in str(caught.value)


def test_version_detection() -> None:
    assert config_version({}, "f", None) == 2
    assert config_version({}, "f", 3) == 3
    assert config_version({"plugins": {}}, "f", None) == 1
    assert config_version({"version": 3}, "f", None) == 3


def test_enable_cdi_spells_out_the_spec_dirs_and_remove_takes_them_back() -> None:
    text = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "x"\n'
    edited = configure_in_place(text, "c.toml", RuntimeChange(enable_cdi=True), None).text
    assert edited is not None
    cri = tomllib.loads(edited)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    back = configure_in_place(edited, "c.toml", RuntimeChange(enable_cdi=True, remove=True), None).text
    assert back is not None and tomllib.loads(back) == tomllib.loads(text)


def test_a_drop_in_not_written_by_cdictk_is_refused() -> None:
    with pytest.raises(CdictkError, match="exists and was not written by cdictk; refusing to replace it"):
        drop_in(V2, current='[debug]\n  level = "info"\n')


def test_earlier_runs_settings_and_other_runtime_names_survive_later_runs() -> None:
    main, drop = drop_in(V2)  # default cdictk, CDI on
    assert main is not None and drop is not None
    other = RuntimeChange(runtime_name="cdictk-two", runtime_path="/opt/two")
    main2, drop2 = drop_in(main, other, current=drop)
    assert main2 is main and drop2 is not None
    cri = tomllib.loads(drop2)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True and cri["containerd"]["default_runtime_name"] == "cdictk"
    assert {"cdictk", "cdictk-two"} <= set(cri["containerd"]["runtimes"])
    # Removing one name keeps the other, and the drop-in with it.
    main3, drop3 = drop_in(main, RuntimeChange(remove=True), current=drop2)
    assert main3 is main and drop3 is not None
    runtimes = tomllib.loads(drop3)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert "cdictk" not in runtimes["runtimes"] and "cdictk-two" in runtimes["runtimes"]
    assert runtimes["default_runtime_name"] == "runc"  # the main file's, back again


def test_edits_to_the_main_cri_table_reach_the_drop_in_on_the_next_run() -> None:
    main, drop = drop_in(V2)
    assert main is not None and drop is not None
    _, drop2 = drop_in(main.replace("pause:3.9", "pause:3.10"), current=drop)
    assert drop2 is not None and 'sandbox_image = "registry.k8s.io/pause:3.10"' in drop2


@pytest.mark.parametrize(
    ("imports", "listed"),
    [
        (["/etc/containerd/conf.d/*.toml"], True),
        (["conf.d/*.toml"], True),  # relative to the main file's directory
        (["/etc/containerd/*.toml"], False),  # Go's * does not cross "/"
        (["/etc/containerd/conf.d/[0-9]*.toml"], True),
        (["/etc/containerd/conf.d/[^9]*.toml"], False),
    ],
)
def test_imports_are_matched_the_way_containerd_matches_them(imports: list[str], listed: bool) -> None:
    text = f"version = 2\nimports = {json.dumps(imports)}\n"
    main, _ = drop_in(text)
    assert (main == text) is listed


def test_cri_settings_from_other_imports_are_carried_into_the_drop_in() -> None:
    """containerd 1.x replaces the whole CRI table with each import's: ours must hold theirs."""
    other = '[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n'
    _, drop = configure_drop_in(
        'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
        "/etc/containerd/config.toml",
        drop_in=DROP_IN,
        drop_in_text=None,
        change=RuntimeChange(),
        installed=None,
        imported=[("/etc/containerd/conf.d/10-registry.toml", other)],
    )
    assert drop.text is not None
    cri = tomllib.loads(drop.text)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["registry"] == {"config_path": "/etc/containerd/certs.d"}


def test_in_place_remove_restores_the_previous_default_from_the_backup() -> None:
    edited = configure_in_place(V2, "c.toml", CHANGE, None).text
    assert edited is not None
    back = configure_in_place(edited, "c.toml", RuntimeChange(remove=True), None, tomllib.loads(V2)).text
    assert back is not None
    assert (
        tomllib.loads(back)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"]
        == "runc"
    )


def test_in_place_second_run_with_set_as_default_changes_nothing() -> None:
    text = V2.replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"') + (
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '        runtime_type = "io.containerd.runc.v2"\n'
    )
    first = configure_in_place(text, "c.toml", CHANGE, None).text
    assert first is not None
    assert configure_in_place(first, "c.toml", CHANGE, None).text is first


@pytest.mark.parametrize("name", ["runc", "", 'bad"name', "a b"])
def test_unusable_runtime_names_are_refused(name: str) -> None:
    with pytest.raises(CdictkError, match="is not a usable runtime name"):
        drop_in(V2, RuntimeChange(runtime_name=name))


def test_a_multi_line_imports_list_keeps_its_layout_and_comments() -> None:
    text = 'version = 2\nimports = [\n  "/etc/containerd/a.toml",  # registry mirrors\n  "/etc/containerd/b.toml",\n]\n'
    main, drop = drop_in(text, RuntimeChange())
    assert main == text.replace('b.toml",\n]', f'b.toml",\n  "{DROP_IN}",\n]')
    assert main is not None
    restored, gone = drop_in(main, RuntimeChange(remove=True), current=drop)
    assert restored == text and gone is None


def test_a_hand_edited_drop_in_of_ours_in_any_shape_is_rebuilt_not_a_traceback() -> None:
    """A table where cdictk wrote one now holds a string: the drop-in is made again from the main file."""
    from cdictk.configure.containerd import DROP_IN_HEADER

    _, drop = drop_in(V2)
    assert drop is not None
    for broken in (
        f'{DROP_IN_HEADER}\nversion = 2\nplugins."io.containerd.grpc.v1.cri" = {{containerd = "v"}}\n',
        f'{DROP_IN_HEADER}\nversion = 2\nplugins."io.containerd.grpc.v1.cri".containerd.runtimes = [1]\n',
    ):
        _, rebuilt = drop_in(V2, current=broken)
        assert rebuilt == drop


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "a"\n  sandbox_image = "b"\n',
            '/etc/containerd/config.toml:4:22: invalid TOML: duplicate key "sandbox_image"',
        ),
        (
            "version = 2\na = " + "9" * 5000 + "\n",
            "/etc/containerd/config.toml:2:5005: invalid TOML: Invalid number",
        ),
    ],
)
def test_a_file_tomlkit_chokes_on_is_one_error_with_its_place(text: str, message: str) -> None:
    """tomlkit raises KeyAlreadyPresent, with no place, for a key given twice: it was a traceback."""
    with pytest.raises(CdictkError) as caught:
        drop_in(text)
    assert str(caught.value.problem) == message
    with pytest.raises(CdictkError) as caught:
        configure_in_place(text, "/etc/containerd/config.toml", CHANGE, None)
    assert str(caught.value.problem) == message
