"""The store: keys (as hashes), teams, and the spend ledger, in SQLite or PostgreSQL."""
