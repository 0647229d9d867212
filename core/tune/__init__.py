"""Fine-tuning: LoRA on the cluster, data parallel, with mlx-lm's own trainer.

The pure parts live here, below ``core.run`` and beside ``core.library``:

- ``settings``: the settings a person sets (iterations, batch size, learning rate, LoRA
  rank and layers), their defaults, a short explanation each, and their checks.
- ``data``: a dropped folder or ``.jsonl`` file read as mlx-lm reads it (``chat``,
  ``completions``, ``text``), validated line by line before anything starts.
- ``fit``: whether the model, its LoRA and optimizer state and the activations fit on
  every node, and which node is the limit when they do not.
- ``adapters``: the trained adapters kept in the user data folder, with their base
  model, data hash and final losses.

The job itself is ``core.run.tasks.finetune`` (the controller) and ``core.worker.finetune``
(each rank, running ``mlx_lm.tuner.train``).
"""
