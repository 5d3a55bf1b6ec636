"""A node agent that prepares and unprepares GPU claims the way a DRA kubelet plugin does.

The kubelet's NodePrepareResources and NodeUnprepareResources calls are read from a JSON file:

    {"calls": [{"prepare": "claim-a", "devices": ["1", "0:1"]},
               {"prepare": "claim-b", "devices": ["GPU-..."]},
               {"unprepare": "claim-a"}]}

A prepare writes the claim's transient CDI spec and prints the CDI device ids the kubelet would get;
an unprepare removes it. The claims prepared are kept in a checkpoint, as DRA drivers keep theirs:
at every start, specs of claims the checkpoint does not list (the agent died between the two steps)
are collected, so the spec dir stays clean across restarts. A prepare writes the spec before the
checkpoint, and an unprepare drops it from the checkpoint before removing the spec: a crash between
the two leaves a spec that the next start collects, never a checkpointed claim without its spec.

    python3 examples/node_agent.py calls.json [--spec-dir /var/run/cdi] [--state-dir DIR]
        [--driver-root /] [--proc-root /proc] [--sys-root /sys]

Only the documented names of cdictk.api are used (docs/api.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

from cdictk.api import CdictkError, NodeSpecs, TransientSpecs


class Checkpoint:
    """The claims prepared, in one JSON file replaced atomically."""

    def __init__(self, state_dir: str) -> None:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        self.path = os.path.join(state_dir, "checkpoint.json")
        try:
            with open(self.path, encoding="utf-8") as file:
                self.claims: dict[str, list[str]] = json.load(file)["claims"]
        except FileNotFoundError:
            self.claims = {}

    def save(self) -> None:
        directory = os.path.dirname(self.path)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".checkpoint.")
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump({"claims": self.claims}, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, self.path)


def run(calls: list[dict[str, Any]], node: NodeSpecs, store: TransientSpecs, checkpoint: Checkpoint) -> None:
    removed = store.gc(checkpoint.claims)
    if removed:
        print(f"collected {len(removed)} stale claim spec(s): {' '.join(removed)}")
    for call in calls:
        if "prepare" in call:
            uid = str(call["prepare"])
            devices = [str(device) for device in call["devices"]]
            names = store.write(uid, node.claim_spec(uid, devices))
            checkpoint.claims[uid] = devices
            checkpoint.save()
            print(f"prepare {uid}: {' '.join(names)}")
        elif "unprepare" in call:
            uid = str(call["unprepare"])
            checkpoint.claims.pop(uid, None)
            checkpoint.save()
            store.remove(uid)
            print(f"unprepare {uid}")
        else:
            raise CdictkError("", "calls", f"neither prepare nor unprepare: {json.dumps(call)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("calls", help="JSON file with the kubelet's calls")
    parser.add_argument("--spec-dir", default="/var/run/cdi")
    parser.add_argument("--state-dir", default="/var/lib/cdictk-node-agent")
    parser.add_argument("--driver-root", default="/")
    parser.add_argument("--proc-root", default="/proc")
    parser.add_argument("--sys-root", default="/sys")
    args = parser.parse_args(argv)
    try:
        with open(args.calls, encoding="utf-8") as file:
            calls = json.load(file)["calls"]
        node = NodeSpecs(args.driver_root, proc_root=args.proc_root, sys_root=args.sys_root)
        run(calls, node, TransientSpecs(args.spec_dir), Checkpoint(args.state_dir))
    except CdictkError as exc:  # before ValueError: some are both
        print(f"node-agent: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError, KeyError) as exc:
        print(f"node-agent: {args.calls}: {exc!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
