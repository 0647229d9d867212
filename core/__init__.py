"""MacMesh core: pure Python, no Qt. See docs/architecture.md."""

__version__ = "0.1.0"
