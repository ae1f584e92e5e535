"""The README's quick start runs exactly as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quick_start_runs(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start\n.*?```python\n(.*?)```", text, flags=re.DOTALL)
    assert block, "README has no quick start block"
    script = tmp_path / "quick_start.py"
    script.write_text(block.group(1))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "True 2 2 2" in done.stdout  # committed, 2 rows (key 2 collapsed), 2 hourly data + delete files
    assert "PipelineState(pipeline_id='p2', batch_id=0" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "3"
    assert (tmp_path / "warehouse" / "db" / "events" / "metadata").is_dir()
