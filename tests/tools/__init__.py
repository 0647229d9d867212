"""Maintenance scripts for the repository itself (run as `python -m tests.tools.NAME`)."""
