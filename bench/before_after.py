"""One benchmark run against an earlier commit and this checkout, alternately, in one run.

    .venv/bin/python bench/before_after.py --before 277650a [--rounds 3] [--metric REGEX] [--record] \
        -- bench/ingest.py --events 100000 --rounds 1

The earlier commit is checked out into a temporary git worktree (removed afterwards); the bench
command runs there and here by turns (before, after, before, after, ...), each time in its own
process with this virtualenv's Python and the tree's own `icetide` on the path, so both see the
same machine load. Each run's output is printed whole. With `--metric`, a regular expression
whose first group is a number in the output (commas allowed; the last match counts), the medians
of both sides and their ratio (after / before) are printed too; `--metric 'label=REGEX'`, given
several times, compares several figures of one output. With `--record`, all of it is appended to
docs/benchmarks.md under one heading naming both commits and the command.

`--before-python` / `--after-python` run a side with another interpreter, for commits on other
stacks: e.g. 8fd3bac (PySpark 3.5.7, Iceberg 1.10.2 from a wheel) in a venv made from its own
pyproject.toml, against this checkout on PySpark 4.1; or this checkout on `.venv-spark35/bin/python`
beside `.venv/bin/python` (`--before HEAD`). `--also-python` adds a third side in the same
rotation: this checkout on another interpreter (say `.venv-spark35/bin/python`), compared with
both others.
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


def labelled(spec: str) -> tuple[str, str]:
    """`label=REGEX` -> (label, REGEX); a bare REGEX is labelled "metric"."""
    label, sep, pattern = spec.partition("=")
    if sep and label.replace(" ", "").replace("_", "").isalnum():
        return label, pattern
    return "metric", spec


def metric(pattern: str, output: str) -> float:
    found = re.findall(pattern, output)
    if not found:  # reported, not fatal: the runs are kept, and a later look can read the figure
        print(f"--metric {pattern!r} matches nothing in one run's output", file=sys.stderr)
        return float("nan")
    last = found[-1]
    return float((last[0] if isinstance(last, tuple) else last).replace(",", ""))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--before", required=True, help="the earlier commit (any git revision)")
    p.add_argument("--rounds", type=int, default=3, help="runs on each side, alternating")
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        help="[label=]regular expression whose first group is the number to compare; repeatable",
    )
    p.add_argument("--before-python", default=sys.executable, help="the interpreter of the earlier side")
    p.add_argument("--after-python", default=sys.executable, help="the interpreter of this checkout's side")
    p.add_argument("--also-python", help="a third side: this checkout with another interpreter")
    p.add_argument("command", nargs="+", help="the bench script and its arguments (after --)")
    args = p.parse_args()
    before_commit = git("rev-parse", "--short", args.before)
    changed = git("status", "--porcelain", "--", "icetide", "bench")
    after_commit = git("rev-parse", "--short", "HEAD") + ("+changes" if changed else "")
    # Absolute, as each side runs in its own tree; not resolved: a venv's python is a symlink.
    pythons = {"before": args.before_python, "after": args.after_python}
    if args.also_python:
        pythons["also"] = args.also_python
    pythons = {side: os.path.abspath(python) for side, python in pythons.items()}
    commits = {"before": before_commit, "after": after_commit, "also": after_commit}
    outputs: dict[str, list[str]] = {side: [] for side in pythons}
    with tempfile.TemporaryDirectory(prefix="icetide-before-") as temp:
        tree = Path(temp) / "tree"
        git("worktree", "add", "--detach", str(tree), args.before)
        try:
            for i in range(args.rounds):
                for side, python in pythons.items():
                    print(f"round {i + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
                    outputs[side].append(run_in(tree if side == "before" else ROOT, args.command, python))
        finally:
            git("worktree", "remove", "--force", str(tree))
    command = " ".join(args.command)
    shown = {side: os.path.relpath(python, ROOT) for side, python in pythons.items()}
    stacks = ", ".join(f"{side} with {python}" for side, python in shown.items())
    body = [f"`{command}`, {args.rounds} runs each, alternating; {stacks}; {machine()}\n"]
    for side, outs in outputs.items():
        for i, out in enumerate(outs):
            body.append(f"{side} ({commits[side]}), run {i + 1}:\n\n{out.strip()}\n")
    if args.metric:
        body.append(compared(args.metric, outputs, {side: f"{side} ({commits[side]})" for side in outputs}))
    text = "\n".join(body)
    print(text)
    if args.record:
        record(f"bench/before_after.py: {command}, {before_commit} against {after_commit}", text)


def compared(specs: list[str], outputs: dict[str, list[str]], names: dict[str, str]) -> str:
    """Each metric's median on each side, with the runs; each later side over the first, and this
    checkout's two interpreters one over the other."""
    pairs = [(side, "before") for side in list(names)[1:]] + ([("after", "also")] if "also" in names else [])
    headers = ["metric", *names.values(), *(f"{a} / {b}" for a, b in pairs)]
    rows = []
    for label, pattern in map(labelled, specs):
        values = {side: [metric(pattern, out) for out in outs] for side, outs in outputs.items()}
        medians = {side: median(v) for side, v in values.items()}
        cells = [f"{medians[side]:,.2f} ({' '.join(f'{v:,.2f}' for v in values[side])})" for side in names]
        ratios = [f"{medians[a] / medians[b]:.2f}x" for a, b in pairs]
        rows.append([label, *cells, *ratios])
    return render_table(headers, rows) + "\n"


if __name__ == "__main__":
    main()
