"""Regenerate tests/data/cdi-reference/: every case of :mod:`tests.cdiref.cases` through the CDI reference
library, v1.1.0 as NVIDIA's toolkit vendors it.

    python -m tests.cdiref.regenerate --source DIR [--go PATH]

DIR is a checkout of NVIDIA's container toolkit with its ``vendor/`` tree (it must vendor
``tags.cncf.io/container-device-interface v1.1.0``). It is copied to a temporary directory, the small
driver below is added as ``cmd/cdiref`` and built offline (``GOTOOLCHAIN=local GOFLAGS=-mod=vendor``);
nothing of the library, nor the build, is kept. The cases run in a directory holding the fixtures their
device nodes name. Each family's cases go to one gzipped JSON-lines file: the inputs (with the OCI config as the
Go library holds it: parsed into its struct and written back) and the reference's outcome.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests import REPO
from tests.cdiref.cases import Case, cases, make_fixtures, reapply_cases

CORPUS = REPO / "tests" / "data" / "cdi-reference"
LIBRARY = "tags.cncf.io/container-device-interface v1.1.0"

# The driver: cases as JSON lines on stdin, the library's outcome for each on stdout. A spec dir per
# entry of "dirs" (null: a dir that does not exist), a manual-refresh cache over them, the errors per
# file, the loaded spec files, the devices and the file each comes from, then InjectDevices into the
# config. A panic while loading is the case's outcome.
DRIVER = r"""
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

type caseIn struct {
	ID      string             `json:"id"`
	Dirs    []map[string]string `json:"dirs"`
	Config  json.RawMessage    `json:"config"`
	Devices []string           `json:"devices"`
}

type caseOut struct {
	ID          string              `json:"id"`
	Panic       string              `json:"panic,omitempty"`
	Loaded      []string            `json:"loaded"`
	Errors      map[string][]string `json:"errors"`
	Devices     map[string]string   `json:"devices"`
	ConfigIn    json.RawMessage     `json:"config_in,omitempty"`
	ConfigError string              `json:"config_error,omitempty"`
	InjectError string              `json:"inject_error,omitempty"`
	Unresolved  []string            `json:"unresolved,omitempty"`
	ConfigOut   json.RawMessage     `json:"config_out,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		var c caseIn
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, "bad case:", err)
			os.Exit(2)
		}
		result := run(c)
		line, err := json.Marshal(result)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cannot marshal:", err)
			os.Exit(2)
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "read:", err)
		os.Exit(2)
	}
}

func run(c caseIn) (result caseOut) {
	result = caseOut{ID: c.ID, Loaded: []string{}, Errors: map[string][]string{}, Devices: map[string]string{}}
	root, err := os.MkdirTemp("", "cdiref-case-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	rel := func(path string) string {
		r, err := filepath.Rel(root, path)
		if err != nil || strings.HasPrefix(r, "..") {
			return path
		}
		return r
	}
	var dirs []string
	for i, files := range c.Dirs {
		dir := filepath.Join(root, fmt.Sprintf("d%d", i))
		dirs = append(dirs, dir)
		if files == nil {
			continue // a spec dir that does not exist
		}
		must(os.MkdirAll(dir, 0o755))
		for name, text := range files {
			path := filepath.Join(dir, name)
			must(os.MkdirAll(filepath.Dir(path), 0o755))
			must(os.WriteFile(path, []byte(text), 0o644))
		}
	}

	// The configs are normalised the way runtimes hold them: Go's own struct, marshalled back.
	var spec *oci.Spec
	if len(c.Config) > 0 && string(c.Config) != "null" {
		spec = &oci.Spec{}
		if err := json.Unmarshal(c.Config, spec); err != nil {
			result.ConfigError = err.Error()
			spec = nil
		} else {
			result.ConfigIn, _ = json.Marshal(spec)
		}
	}

	defer func() {
		if r := recover(); r != nil {
			result.Panic = fmt.Sprint(r)
		}
	}()
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			result.Errors[rel(path)] = append(result.Errors[rel(path)], strings.ReplaceAll(e.Error(), root+"/", ""))
		}
		sort.Strings(result.Errors[rel(path)]) // conflicts come in the order of a map's keys
	}
	for _, vendor := range cache.ListVendors() {
		for _, s := range cache.GetVendorSpecs(vendor) {
			result.Loaded = append(result.Loaded, rel(s.GetPath()))
		}
	}
	sort.Strings(result.Loaded)
	for _, name := range cache.ListDevices() {
		result.Devices[name] = rel(cache.GetDevice(name).GetSpec().GetPath())
	}
	if spec == nil {
		return result
	}
	unresolved, err := cache.InjectDevices(spec, c.Devices...)
	if err != nil {
		result.InjectError = strings.ReplaceAll(err.Error(), root+"/", "")
		result.Unresolved = unresolved
		return result
	}
	result.ConfigOut, _ = json.Marshal(spec)
	return result
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
"""


def build(source: Path, go: str, work: Path) -> Path:
    modules = (source / "vendor" / "modules.txt").read_text()
    if f"# {LIBRARY}\n" not in modules:
        sys.exit(f"{source}/vendor does not hold {LIBRARY}")
    tree = work / "src"
    shutil.copytree(source, tree, symlinks=True)
    (tree / "cmd" / "cdiref").mkdir(parents=True)
    (tree / "cmd" / "cdiref" / "main.go").write_text(DRIVER)
    binary = work / "cdiref"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=vendor", "CGO_ENABLED": "0"}
    env.setdefault("GOCACHE", str(work / "gocache"))
    subprocess.run([go, "build", "-o", str(binary), "./cmd/cdiref"], cwd=tree, env=env, check=True)
    return binary


def run(binary: Path, fixtures: Path, batch: Iterable[Case]) -> list[tuple[Case, dict[str, Any]]]:
    batch = list(batch)
    lines = "".join(json.dumps({k: c[k] for k in ("id", "dirs", "config", "devices")}) + "\n" for c in batch)
    done = subprocess.run(
        [str(binary)], input=lines, capture_output=True, text=True, cwd=fixtures, check=True
    )
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    if [o["id"] for o in outcomes] != [c["id"] for c in batch]:
        sys.exit("the driver's answers do not match the cases")
    return list(zip(batch, outcomes, strict=True))


def record(case: Case, ref: dict[str, Any]) -> dict[str, Any]:
    if ref.get("config_error"):
        sys.exit(f"{case['id']}: the library cannot read the case's config: {ref['config_error']}")
    entry = dict(case)
    entry["config"] = ref.pop("config_in", None)
    del ref["id"]
    entry["ref"] = ref
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--source", type=Path, required=True, help="NVIDIA container toolkit source with vendor/"
    )
    parser.add_argument("--go", default="go", help="the go command (Go 1.22 or later)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cdiref-") as tmp:
        work = Path(tmp)
        binary = build(args.source.resolve(), args.go, work)
        fixtures = work / "cwd"
        fixtures.mkdir()
        make_fixtures(fixtures)
        first = run(binary, fixtures, cases())
        again = run(binary, fixtures, reapply_cases(first))
    by_family: dict[str, list[dict[str, Any]]] = {}
    for case, ref in first + again:
        by_family.setdefault(case["family"], []).append(record(case, ref))
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    CORPUS.mkdir(parents=True)
    for family, entries in by_family.items():
        text = "".join(
            json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n" for entry in entries
        )
        # mtime 0: the same cases give the same bytes, so a regeneration that changes nothing shows no diff.
        (CORPUS / f"{family}.jsonl.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
        print(f"{family}: {len(entries)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
