"""Reaching a node: SSH connections and keys, targets, shipping the worker, copying a model."""
