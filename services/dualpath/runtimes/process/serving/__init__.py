"""The process runtime: the model's objects as separate OS processes over gRPC (docs/services.md).

Thin shells only: each service builds the same `Cluster` as the one-process runtime from the
same scenario, runs the part its process owns (storage, one node's engines, or the global
scheduler), and reaches the other parts over gRPC. See docs/services.md.
"""
