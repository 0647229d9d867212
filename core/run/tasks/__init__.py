"""The kinds of job, each a task over one ``core.run.session.Session``.

A task takes a session (the order of its steps is the session's alone: a task calls
``session.start(until=...)`` and goes on from there), does its own work on the running
job, and returns a typed result; it keeps its run in the history (``RunKind``) itself,
so the command line and the window keep the same records by construction:

- ``chat``: one answer (``macmesh run``, ``macmesh demo --headless``); the window's
  chat keeps each answer with ``keep_answer``.
- ``compare``: one Mac against the cluster, or base against base + adapter.
- ``linktest``: every link the job uses, measured through MLX.
- ``finetune``: LoRA, data parallel, to an adapter.

``records.job_record`` is what every task's record says of its job (model, nodes,
strategy, split, backend, versions), written once.

Serving (``core.serve``) is the API's task over a session, in the layer above.
"""
