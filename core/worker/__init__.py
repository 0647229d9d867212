"""The program every rank runs: ``python -m core.worker --model PATH ...``.

It depends on mlx, mlx-lm and the standard library only, so it can run on a
peer Mac with nothing of MacMesh's GUI installed. See ``protocol.py`` for what
it reads and writes.
"""
