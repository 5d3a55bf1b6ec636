"""The prestart hook's old module name, which launchers written before the move still import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cdictk.runtime import launchers


def test_a_legacy_hook_written_before_the_move_still_runs(tmp_path: Path) -> None:
    """What ``install-legacy-hook`` wrote then: docker run --gpus must keep working after an upgrade."""
    path = tmp_path / "nvidia-container-runtime-hook"
    python = sys.executable
    paths = launchers.python_reads(python).imports
    path.write_text(
        f"#!{python} -IS\n# Written by `cdictk runtime install-legacy-hook`; why: cdictk/runtime/launchers.py\n"
        f"import sys; sys.path += {paths!r}\nfrom cdictk.prestart.main import main; sys.exit(main())\n"
    )
    os.chmod(path, 0o755)
    assert "from cdictk.prestart.main import main" in path.read_text()
    result = subprocess.run([path, "--help"], capture_output=True, text=True, env={}, check=False)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(
        "usage: nvidia-container-runtime-hook [--debug] [--config FILE] prestart|"
    )
    poststop = subprocess.run([path, "poststop"], capture_output=True, text=True, env={}, check=False)
    assert (poststop.returncode, poststop.stdout, poststop.stderr) == (0, "", "")
