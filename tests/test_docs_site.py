"""The docs site: built once per session with `mkdocs build --strict` (as `make docs` does), the
tutorial read in headless Chromium the way a person reads it, and the generated reference pages
checked against the code they are generated from."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.browser import Chromium

ROOT = Path(__file__).resolve().parent.parent

TUTORIAL_STEPS = [
    "Install icetide",
    "Write a pipeline file",
    "Land some records",
    "Run the pipeline",
    "Read the table",
    "Change, delete, and send a bad record",
    "Run it again: nothing lands twice",
    "Look at the table's health",
]


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built site (a few seconds: no Spark, the hook imports only the config and CLI modules)."""
    out = tmp_path_factory.mktemp("docs") / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    with Chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", ROOT / "docs_hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tutorial_steps_in_chromium(site: Path, browser: Chromium) -> None:
    page = browser.load((site / "tutorial" / "first-pipeline.html").as_uri(), settle_seconds=0.5)
    assert page.errors == []
    assert page.evaluate("document.title").startswith("A first pipeline in ten minutes")
    headings = page.evaluate(
        "Array.from(document.querySelectorAll('article h2')).map(h => h.textContent.replace('¶', '').trim())"
    )
    steps = [h for h in headings if re.match(r"^\d+\. ", h)]
    assert steps == [f"{i}. {title}" for i, title in enumerate(TUTORIAL_STEPS, 1)], headings
    code = page.evaluate("Array.from(document.querySelectorAll('article pre')).map(p => p.innerText).join('\\n')")
    for command in ("make install", "icetide run orders.yaml --once", "icetide status lake.shop.orders"):
        assert command in code
    # A person finds the four parts of the site in its navigation, and the tutorial's links work.
    nav = page.evaluate("document.querySelector('nav.md-nav--primary').innerText")
    for part in ("Tutorial", "How-to guides", "Reference", "Explanation"):
        assert part in nav
    links = page.evaluate("Array.from(document.querySelectorAll('article a[href$=\".html\"]')).map(a => a.href)")
    assert links
    for link in links:
        assert Path(link.removeprefix("file://").split("#")[0]).is_file(), link


def test_pipeline_keys_page_lists_every_key_of_the_key_tables(site: Path, hook: ModuleType) -> None:
    text = (site / "reference" / "pipeline-keys.html").read_text()
    blocks = yaml.safe_load(hook.KEYS_FILE.read_text())["blocks"]
    assert len(blocks) >= 15
    for block in blocks:
        for key in hook.key_table(block["keys_from"]):
            full = f"{block['path']}.{key}" if block["path"] else key
            assert f"<code>{full.replace('<', '&lt;').replace('>', '&gt;')}</code>" in text, full


def test_a_key_the_reference_lacks_fails_the_build(hook: ModuleType, tmp_path: Path, monkeypatch: Any) -> None:
    blocks = yaml.safe_load(hook.KEYS_FILE.read_text())
    trigger = next(b for b in blocks["blocks"] if b["path"] == "trigger")
    del trigger["keys"]["max_files"]
    trigger["keys"]["max_batches"] = {"default": "1", "text": "not a key"}
    keys_file = tmp_path / "pipeline-keys.yml"
    keys_file.write_text(json.dumps(blocks))
    monkeypatch.setattr(hook, "KEYS_FILE", keys_file)
    with pytest.raises(Exception, match=r"max_files.*TRIGGER_KEYS") as raised:
        hook.documented_blocks()
    assert "max_batches" in str(raised.value)


def test_cli_and_api_pages_cover_the_code(site: Path, hook: ModuleType) -> None:
    import icetide

    cli = (site / "reference" / "cli.html").read_text()
    parser = importlib.import_module(hook.module_defining("build_parser")).build_parser()
    for command, _, _ in hook._commands(parser, "icetide"):
        assert f"{command}</code>" in cli, command
    assert {"icetide demo", "icetide run", "icetide status", "icetide maintain"} <= {
        command for command, _, _ in hook._commands(parser, "icetide")
    }
    assert "--fold-deletes" in cli and "icetide catalog serve</code>" in cli
    api = (site / "reference" / "python-api.html").read_text()
    for name in icetide.__all__:
        if not name.startswith("_"):
            assert f'id="icetide.{name}"' in api, name


def test_tutorial_pipeline_file_loads(tmp_path: Path) -> None:
    import icetide

    text = (ROOT / "docs" / "tutorial" / "first-pipeline.md").read_text()
    block = re.search(r"## 2\. Write a pipeline file\n.*?```yaml\n(.*?)```", text, flags=re.DOTALL)
    assert block, "the tutorial has no pipeline file"
    (tmp_path / "orders.yaml").write_text(block.group(1))
    config = icetide.load_config(tmp_path / "orders.yaml")
    assert (config.pipeline, config.table.name, config.dead_letter) == (
        "orders",
        "lake.shop.orders",
        "lake.shop.orders_dead_letter",
    )
    assert config.source == {"files": {"path": "landing/", "format": "json", "min_age_seconds": 0}}
