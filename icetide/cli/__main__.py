"""`python -m icetide.cli`: the same as the `icetide` command."""

from icetide.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
