"""An OCI hook for the end-to-end tests: records what the runtime gave it.

Usage (in a CDI spec or config.json): path = the Python interpreter,
args = [python, "-I", this file, LOG_DIR]. Writes LOG_DIR/<id>.state.json (the state from stdin),
LOG_DIR/<id>.config.json (the bundle's config.json, as the runtime saw it) and LOG_DIR/<id>.env.
"""

import json
import os
import shutil
import sys


def main() -> int:
    log_dir = sys.argv[1]
    state = json.load(sys.stdin)
    container = state["id"]
    with open(os.path.join(log_dir, f"{container}.state.json"), "w", encoding="utf-8") as out:
        json.dump(state, out)
    shutil.copyfile(
        os.path.join(state["bundle"], "config.json"), os.path.join(log_dir, f"{container}.config.json")
    )
    with open(os.path.join(log_dir, f"{container}.env"), "w", encoding="utf-8") as out:
        out.write("\n".join(sorted(os.environ)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
