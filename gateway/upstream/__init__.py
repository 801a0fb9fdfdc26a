"""The engine link client: the only gateway package that sees engine pb2."""
