"""The compose cluster's control and fault API, through the Docker Engine API.

`control.Cluster` wraps a `docker` client around one compose project: status, kill, start,
pause, unpause, restart, and network partitions (`partitions.py`); `faults.py` runs a fault
schedule (the `--fault` grammar of `dualpath up`, plus `partition`) against the containers;
`clients.py` is a small loop of agent turns that records what clients saw meanwhile. The
CLI is `dualpath cluster ...` (cli/cluster.py); docs/containers.md has the figures.
"""
