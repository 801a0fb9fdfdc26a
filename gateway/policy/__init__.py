"""Pure decisions: no I/O, no awaits, injected clocks and randomness."""
