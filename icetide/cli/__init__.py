"""The command line: `icetide run`, `status`, `maintain`, `demo`, `catalog`, and the status page."""
