"""The one error a Start says to people: ``ClusterError``, raised by every room of
``core.run`` (and the front ends) when the cluster cannot run a job. Standard library
only, so any layer imports it."""

from __future__ import annotations


class ClusterError(Exception):
    """The cluster cannot run this job; the message says why and what to do."""
