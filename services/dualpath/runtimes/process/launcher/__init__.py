"""`dualpath up` / `run` / `load`: the whole emulated cluster as local OS processes, and what
drives it (the demo workload, a Locust load: `dualpath.loadgen` is the client side)."""
