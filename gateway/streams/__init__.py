"""The client side of streams: every streamed response's events, kept bounded, so that a
client that drops can reattach and get the rest with no gap and no duplicate."""
