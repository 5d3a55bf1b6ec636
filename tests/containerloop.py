"""Short containers started and removed in a loop until killed, the way a busy node starts pods.

    sudo python -m tests.containerloop [--runtime runc|crun] [--rootfs DIR] [--pause SECONDS]

For each container the loop mounts a writable overlay of the rootfs in the host's mount namespace
(as containerd and podman mount an image's snapshot), runs ``/bin/true`` in it with runc (or crun),
then unmounts and removes it: the host's mount table changes several times a second. Run it beside
the test suite to see that the tests leave the host alone and are not disturbed by what else starts
on the machine.
SIGINT or SIGTERM ends it after the container under way, with nothing left behind; it prints how
many containers ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from realnode.containers import oci_config

ROOTFS = Path(os.environ.get("CDICTK_ROOTFS_CACHE", "/var/cache/cdictk-tests/rootfs")) / "minbase-bookworm"


class Stopper:
    """Set by SIGTERM or SIGINT: the container under way ends as usual (its container removed, its
    overlay unmounted), then the loop."""

    def __init__(self) -> None:
        self.stopped = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = True


def one_container(runtime: str, rootfs: Path, work: Path, number: int) -> str:
    """One container: overlay mounted, run, unmounted, removed. Returns "" or what went wrong.

    Every command runs in a session of its own: a ^C or a signal to the loop's process group is for
    the loop, which ends after the container under way, not for a mount or a container half made.
    """
    bundle = work / f"c{number}"
    upper, scratch, merged = bundle / "upper", bundle / "work", bundle / "rootfs"
    for directory in (upper, scratch, merged):
        directory.mkdir(parents=True)
    options = f"lowerdir={rootfs},upperdir={upper},workdir={scratch}"
    problem = ""
    mounted = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(merged)],
        capture_output=True,
        check=False,
        text=True,
        start_new_session=True,
    )
    if mounted.returncode != 0:
        shutil.rmtree(bundle)
        return f"mount -t overlay: {mounted.stderr.strip()}"
    try:
        config = oci_config(str(merged), ["/bin/true"])
        config["root"]["readonly"] = True
        config["hostname"] = "cdictk-loop"
        (bundle / "config.json").write_text(json.dumps(config))
        state = str(work / "state")
        name = f"cdictk-loop-{os.getpid()}-{number}"
        ran = subprocess.run(
            [runtime, "--root", state, "run", "--bundle", str(bundle), name],
            capture_output=True,
            check=False,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
            start_new_session=True,
        )
        if ran.returncode != 0:
            problem = f"{runtime} run: exit {ran.returncode}: {ran.stderr.strip()[-300:]}"
            subprocess.run(
                [runtime, "--root", state, "delete", "--force", name],
                capture_output=True,
                check=False,
                start_new_session=True,
            )
    finally:
        subprocess.run(["umount", "-l", str(merged)], check=True, start_new_session=True)
        shutil.rmtree(bundle)
    return problem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.containerloop",
        description="Start and remove short containers (an overlay mounted on the host, runc or crun) "
        "in a loop until killed, to run the tests beside a busy container host. Needs root.",
    )
    parser.add_argument("--runtime", choices=("runc", "crun"), default="runc", help="default: runc")
    parser.add_argument(
        "--rootfs", type=Path, default=ROOTFS, help=f"the image's root, never written (default: {ROOTFS})"
    )
    parser.add_argument(
        "--pause", type=float, default=0.0, help="seconds to wait between containers (default: 0)"
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root: it mounts overlays and runs containers")
    if shutil.which(args.runtime) is None:
        parser.error(f"{args.runtime} is not installed (tests/setup-host.sh installs it)")
    if not (args.rootfs / "bin" / "true").exists():
        parser.error(f"{args.rootfs}: no bin/true there (tests/fetch-rootfs.sh builds the cache)")
    stopper = Stopper()
    signal.signal(signal.SIGTERM, stopper)
    signal.signal(signal.SIGINT, stopper)
    work = Path(tempfile.mkdtemp(prefix="cdictk-loop-"))
    count = failed = 0
    print(f"containerloop: {args.runtime} containers on overlays of {args.rootfs} until killed", flush=True)
    try:
        while not stopper.stopped:
            problem = one_container(args.runtime, args.rootfs.resolve(), work, count)
            count += 1
            if problem:
                failed += 1
                print(f"containerloop: container {count}: {problem}", file=sys.stderr, flush=True)
            if args.pause and not stopper.stopped:
                time.sleep(args.pause)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"containerloop: {count} containers, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
