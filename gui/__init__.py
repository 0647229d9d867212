"""MacMesh GUI: thin PySide6 views over `core`."""
