"""`python -m dualpath` = the `dualpath` command (used to spawn service processes)."""

from dualpath.cli.main import main

main()
