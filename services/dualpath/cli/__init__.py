"""The `dualpath` command: one module per command group, named after the command."""
