"""MkDocs hook: the reference pages generated from the code, so they cannot drift from it.

A page holds a marker where generated Markdown goes:

- `<!-- icetide:pipeline-keys -->`: every pipeline-file key, from the key tables the loader
  validates with, described by docs/reference/pipeline-keys.yml. A key a table has and the file
  does not describe (or the other way round) fails the build.
- `<!-- icetide:cli -->`: every command and option, from the CLI's argparse parser.
- `<!-- icetide:python-api -->`: every name `icetide` exports (`icetide.__all__`), rendered from
  its docstring by mkdocstrings.

Key tables are found by their constant's name anywhere under icetide/ (`NAME = ...` at the start
of a line), so modules may move between folders without touching this hook.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import yaml
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "icetide"
KEYS_FILE = ROOT / "docs" / "reference" / "pipeline-keys.yml"

MARKERS = {
    "<!-- icetide:pipeline-keys -->": lambda: pipeline_keys_markdown(),
    "<!-- icetide:cli -->": lambda: cli_markdown(),
    "<!-- icetide:python-api -->": lambda: python_api_markdown(),
}


def _import_this_checkout() -> None:
    """Import icetide from this checkout, not from wherever the environment installed it."""
    if sys.path[:1] != [str(ROOT)]:
        sys.path.insert(0, str(ROOT))
    loaded = sys.modules.get("icetide")
    if loaded is not None and Path(str(loaded.__file__)).resolve().parent != PACKAGE:
        raise PluginError(f"icetide was imported from {loaded.__file__} before the docs hook ran")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    _import_this_checkout()
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


# Pipeline keys --------------------------------------------------------------------------------


def module_defining(name: str) -> str:
    """The dotted name of the one module under icetide/ that assigns or defines `name` at its top level."""
    pattern = re.compile(rf"^(def {re.escape(name)}\(|{re.escape(name)}\s*(:[^=]*)?=)", flags=re.MULTILINE)
    found = [
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in sorted(PACKAGE.rglob("*.py"))
        if pattern.search(path.read_text())
    ]
    if len(found) != 1:
        raise PluginError(f"pipeline-keys: key table {name} is defined in {len(found)} modules ({found}), not one")
    return found[0]


def key_table(name: str) -> list[str]:
    """The keys of key table `name`, as the loader checks them."""
    table = getattr(importlib.import_module(module_defining(name)), name)
    if isinstance(table, str) or not isinstance(table, Collection):
        raise PluginError(f"pipeline-keys: {name} is not a collection of keys")
    return sorted(str(k) for k in table)


def documented_blocks() -> list[dict[str, Any]]:
    """The blocks of pipeline-keys.yml, each checked against its key table."""
    blocks = yaml.safe_load(KEYS_FILE.read_text())["blocks"]
    problems = []
    for block in blocks:
        in_code = set(key_table(block["keys_from"]))
        described = set(block["keys"])
        where = block["path"] or "top level"
        for key in sorted(in_code - described):
            problems.append(f"{where}: key {key!r} ({block['keys_from']}) is not described in {KEYS_FILE.name}")
        for key in sorted(described - in_code):
            problems.append(f"{where}: {KEYS_FILE.name} describes {key!r}, which {block['keys_from']} does not have")
    if problems:
        raise PluginError("pipeline keys and their reference disagree:\n  " + "\n  ".join(problems))
    return list(blocks)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def pipeline_keys_markdown() -> str:
    out = []
    for block in documented_blocks():
        path = block["path"]
        heading = f"`{path}`" if path else "Top level"
        out += [f"## {heading}", ""]
        if path:
            out += [f"{block['title']}.", ""]
        out += ["| key | default | meaning |", "|---|---|---|"]
        for key in sorted(block["keys"]):
            entry = block["keys"][key]
            full = f"{path}.{key}" if path else key
            out.append(f"| `{full}` | {_cell(entry['default'])} | {_cell(entry['text'])} |")
        out.append("")
    return "\n".join(out)


# Command line ---------------------------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser, prefix: str) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(command line, help, parser) for `parser` and every subcommand under it, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", helps.get(name, ""), sub
                yield from _commands(sub, f"{prefix} {name}")


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.option_strings:
            name = ", ".join(f"`{s}`" for s in action.option_strings)
            if action.nargs != 0:
                name += f" `{action.metavar or action.dest.upper()}`"
        else:
            name = f"`{action.metavar or action.dest}`"
        choices = f" One of: {', '.join(f'`{c}`' for c in action.choices)}." if action.choices else ""
        rows.append(f"| {name} | {_cell((action.help or '') + choices)} |")
    if not rows:
        return []
    return ["| argument | meaning |", "|---|---|", *rows, ""]


def cli_markdown() -> str:
    parser = importlib.import_module(module_defining("build_parser")).build_parser()
    out = ["## `icetide`", "", parser.description or "", "", "```text", parser.format_usage().strip(), "```", ""]
    out += _options_table(parser)
    for command, help_text, sub in _commands(parser, "icetide"):
        out += [f"## `{command}`", "", (help_text[:1].upper() + help_text[1:] + ".") if help_text else "", ""]
        out += ["```text", sub.format_usage().strip(), "```", ""]
        out += _options_table(sub)
    return "\n".join(out)


# Python API -----------------------------------------------------------------------------------

# Sections of the API page; a name `icetide` exports that no section lists goes under "More".
API_SECTIONS = {
    "Running pipelines": [
        "run",
        "load_config",
        "PipelineConfig",
        "RunSummary",
        "BatchMetrics",
        "SyncBatchMetrics",
        "BatchPath",
        "FallbackReason",
        "RestartMetrics",
        "Runner",
        "SyncRunner",
        "TwoStageRunner",
    ],
    "Reading a database sync": [
        "read_consistent",
        "ConsistentRead",
    ],
    "Your own Spark job": [
        "spark_session",
        "spark_conf",
        "create_table",
        "UpsertSink",
        "BatchResult",
        "PipelineState",
        "ChangelogStage",
        "StageOptions",
        "MergeSpec",
        "Enrichment",
        "process_key_indexes",
        "install_log_redaction",
    ],
    "Maintenance": [
        "maintain",
        "MaintenancePolicy",
        "MaintenanceReport",
        "compaction",
        "compact",
        "CompactionJob",
        "CompactionResult",
        "convert_equality_deletes",
        "DeleteConversionResult",
        "expire_snapshots",
        "ExpireResult",
        "remove_orphan_files",
        "OrphanResult",
        "rewrite_manifests",
        "ManifestRewriteResult",
        "table_health",
        "TableHealth",
        "HealthThresholds",
        "upgrade_format_version",
    ],
    # The root and its two markers first; the other errors follow by name.
    "Errors": ["IcetideError", "TransientError", "TerminalError"],
}


def python_api_markdown() -> str:
    import icetide

    exported = [n for n in icetide.__all__ if not n.startswith("_")]
    sections = {title: [n for n in names if n in exported] for title, names in API_SECTIONS.items()}
    listed = {n for names in sections.values() for n in names}
    errors = sorted(n for n in exported if n not in listed and n.endswith("Error"))
    sections["Errors"] += errors
    sections["More"] = sorted(n for n in exported if n not in listed and n not in errors)
    out = []
    for title, names in sections.items():
        if not names:
            continue
        out += [f"## {title}", ""]
        for name in names:
            out += [f"::: icetide.{name}", ""]
    return "\n".join(out)
