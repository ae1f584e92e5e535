"""The README and the docs it points to say what is true: the library's quick start (moved to
docs/how-to/spark-job.md) runs exactly as written, the README's example pipeline loads, and every
link of the README reaches a file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import icetide

ROOT = Path(__file__).resolve().parent.parent
QUICK_START = ROOT / "docs" / "how-to" / "spark-job.md"


def test_quick_start_runs(tmp_path: Path) -> None:
    text = QUICK_START.read_text()
    block = re.search(r"## Quick start\n.*?```python\n(.*?)```", text, flags=re.DOTALL)
    assert block, f"{QUICK_START.name} has no quick start block"
    script = tmp_path / "quick_start.py"
    script.write_text(block.group(1))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "True 2 2 2" in done.stdout  # committed, 2 rows (key 2 collapsed), 2 hourly data + delete files
    assert "PipelineState(pipeline_id='p2', batch_id=0" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "3"
    assert (tmp_path / "warehouse" / "db" / "events" / "metadata").is_dir()


def test_readme_example_pipeline_loads(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    example = re.search(r"## Example\n.*?```yaml\n(.*?)```", text, flags=re.DOTALL)
    assert example, "README has no example pipeline"
    pipeline = tmp_path / "orders.yaml"
    pipeline.write_text(example.group(1))
    config = icetide.load_config(pipeline)
    assert (config.pipeline, config.table.name, config.table.key) == ("orders", "lake.shop.orders", ("order_id",))
    assert config.source_kind == "files" and config.mode == "upsert"
    assert "icetide run orders.yaml --once" in text


def test_readme_is_a_landing_page_whose_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert "make demo" in text and "make test" in text
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 15, local
    for link in local:
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"
    for page in ("tutorial/first-pipeline.md", "reference/pipeline-keys.md", "explanation/exactly-once.md"):
        assert f"docs/{page}" in local
