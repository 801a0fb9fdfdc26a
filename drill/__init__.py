"""Failover drills: inject faults into a local cluster under a steady streaming load, check that
every request still completes with the text of an undisturbed run, and report how fast the
gateway noticed, took the replica out and took it back."""
