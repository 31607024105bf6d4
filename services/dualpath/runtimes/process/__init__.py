"""The process runtime: services over gRPC, the Redis control plane, the HTTP
front door, and the launcher of local clusters."""
