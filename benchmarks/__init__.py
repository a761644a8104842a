"""Benchmarks of Hecate against its peers (never part of the test run): `hecate bench`."""
