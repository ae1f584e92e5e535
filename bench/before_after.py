"""One benchmark run against an earlier commit and this checkout, alternately, in one run.

    .venv/bin/python bench/before_after.py --before 277650a [--rounds 3] [--metric REGEX] [--record] \
        -- bench/ingest.py --events 100000 --rounds 1

The earlier commit is checked out into a temporary git worktree (removed afterwards); the bench
command runs there and here by turns (before, after, before, after, ...), each time in its own
process with this virtualenv's Python and the tree's own `icetide` on the path, so both see the
same machine load. Each run's output is printed whole. With `--metric`, a regular expression
whose first group is a number in the output (commas allowed; the last match counts), the medians
of both sides and their ratio (after / before) are printed too. With `--record`, all of it is
appended to docs/benchmarks.md under one heading naming both commits and the command.

`--before-python` / `--after-python` run a side with another interpreter, for commits on other
stacks: e.g. 8fd3bac (PySpark 3.5.7, Iceberg 1.10.2 from a wheel) in a venv made from its own
pyproject.toml, against this checkout on PySpark 4.1; or this checkout on `.venv-spark35/bin/python`
beside `.venv/bin/python` (`--before HEAD`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import machine, median, parser, record, render_table

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def run_in(tree: Path, command: list[str], python: str = sys.executable) -> str:
    """The bench command's output (stdout, then stderr's last lines on failure), run in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([python, *command], cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise SystemExit(f"{' '.join(command)} failed in {tree} (exit {done.returncode}):\n{tail}")
    return done.stdout


def metric(pattern: str, output: str) -> float:
    found = re.findall(pattern, output)
    if not found:
        raise SystemExit(f"--metric {pattern!r} matches nothing in:\n{output}")
    last = found[-1]
    return float((last[0] if isinstance(last, tuple) else last).replace(",", ""))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--before", required=True, help="the earlier commit (any git revision)")
    p.add_argument("--rounds", type=int, default=3, help="runs on each side, alternating")
    p.add_argument("--metric", help="regular expression; its first group is the number to compare")
    p.add_argument("--before-python", default=sys.executable, help="the interpreter of the earlier side")
    p.add_argument("--after-python", default=sys.executable, help="the interpreter of this checkout's side")
    p.add_argument("command", nargs="+", help="the bench script and its arguments (after --)")
    args = p.parse_args()
    # Absolute, as each side runs in its own tree; not resolved: a venv's python is a symlink.
    args.before_python, args.after_python = os.path.abspath(args.before_python), os.path.abspath(args.after_python)
    before_commit = git("rev-parse", "--short", args.before)
    changed = git("status", "--porcelain", "--", "icetide", "bench")
    after_commit = git("rev-parse", "--short", "HEAD") + ("+changes" if changed else "")
    outputs: dict[str, list[str]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="icetide-before-") as temp:
        tree = Path(temp) / "tree"
        git("worktree", "add", "--detach", str(tree), args.before)
        try:
            for i in range(args.rounds):
                sides = (("before", tree, args.before_python), ("after", ROOT, args.after_python))
                for side, where, python in sides:
                    print(f"round {i + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
                    outputs[side].append(run_in(where, args.command, python))
        finally:
            git("worktree", "remove", "--force", str(tree))
    command = " ".join(args.command)
    shown = {
        side: os.path.relpath(python, ROOT)
        for side, python in (("before", args.before_python), ("after", args.after_python))
    }
    stacks = f"before with {shown['before']}, after with {shown['after']}; "
    body = [f"`{command}`, {args.rounds} runs each, alternating; {stacks}{machine()}\n"]
    for side, commit in (("before", before_commit), ("after", after_commit)):
        for i, out in enumerate(outputs[side]):
            body.append(f"{side} ({commit}), run {i + 1}:\n\n{out.strip()}\n")
    if args.metric:
        values = {side: [metric(args.metric, out) for out in outs] for side, outs in outputs.items()}
        rows = [
            [f"{side} ({commit})", f"{median(values[side]):,.2f}", " ".join(f"{v:,.2f}" for v in values[side])]
            for side, commit in (("before", before_commit), ("after", after_commit))
        ]
        ratio = median(values["after"]) / median(values["before"])
        body.append(render_table(["code", "median", "runs"], rows) + f"\n\nafter / before: {ratio:.2f}x\n")
    text = "\n".join(body)
    print(text)
    if args.record:
        record(f"bench/before_after.py: {command}, {before_commit} against {after_commit}", text)


if __name__ == "__main__":
    main()
