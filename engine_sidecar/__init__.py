"""The engine sidecar: a gRPC server that wraps one inference engine on its node."""
