"""The virtual-time runtime: the whole emulated cluster in one process on a virtual
clock (`sim.py` offline, `online.py` with arrivals), deterministic for a seed."""
