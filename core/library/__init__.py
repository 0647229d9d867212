"""The model library: the models already on this Mac, and Hugging Face search, headers
and downloads, all through ``huggingface_hub`` (no cache code of MacMesh's own)."""
