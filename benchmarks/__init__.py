"""Benchmark scripts that run from a checkout (never part of the test run). `hecate bench`
itself is the installed package `models.bench`, which never imports this folder."""
