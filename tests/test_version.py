"""The version is written in one place, pyproject.toml; `icetide.__version__` and `icetide --version`
read it from the installed package's metadata. Pure Python."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

import icetide
from icetide.cli.main import build_parser

ROOT = Path(icetide.__file__).resolve().parent.parent


def test_the_version_is_pyprojects_as_installed() -> None:
    written = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    installed = importlib.metadata.version("icetide")
    assert icetide.__version__ == installed == written, "pyproject.toml changed since the install: make install"
    sources = "\n".join(p.read_text() for p in (ROOT / "icetide").rglob("*.py"))
    assert not re.search(r"__version__\s*=\s*['\"]", sources)  # no second copy


def test_cli_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"icetide {icetide.__version__}\n"
