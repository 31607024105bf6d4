"""`make bench`: the virtual-time runtime, the process runtime, Locust, the link fabric."""
