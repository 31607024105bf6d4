"""`dualpath up` / `dualpath run`: the whole emulated cluster as local OS processes."""
