"""The shardgate gateway: OpenAI HTTP/SSE and gRPC in front of engine sidecars."""
