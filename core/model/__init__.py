"""A model folder as data: config and safetensors headers, manifests, the demo model."""
