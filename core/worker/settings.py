"""The worker's settings and limits, shared by the ranks and the controller: the
heartbeat, the batch and prefill sizes, the prompt cache, the link test's bounds, and the
environment the worker reads besides MLX's own (``ENV_*``). Standard library only."""

from __future__ import annotations

HEARTBEAT_S = 1.0
MAX_LINK_SIZES = 16  # message sizes in one link test
MAX_LINK_BYTES = 1 << 30
DEFAULT_MAX_TOKENS = 128  # a generate command without max_tokens
# Requests a rank generates at once (``--batch``; ``core.worker.batching``). Measured on
# the demo's 2-rank pipeline (README, "Measured here"): 8 at once gave 2.4x the tokens/s
# of one, 16 gave 3.4x but twice the KV caches the planner reserves and the time to a
# first token; 8 is the default, 16 where memory has room.
DEFAULT_BATCH = 8
MAX_BATCH = 256
# Tokens of a prompt read in per model call (mlx-lm's prefill step size, 2048 by default),
# on both paths (batching or not: the same chunks give the same greedy answers). A cancel
# (the client left, Stop) takes effect between chunks, and a batch's running streams get a
# token between a newcomer's chunks: smaller chunks end a cancelled prompt and pause the
# others for less. On this CPU path 512 read no slower than 2048 (the demo's 2-rank
# pipeline, a 2,398-token chat: 22 s vs 41 s, at load averages 4.7 and 5.0; a ~5,600-token
# prompt on a wider tiny model: 6.4 s vs 11.2 s): a CPU gains nothing from bigger chunks.
PREFILL_STEP = 512
# The largest chunk while other requests of the batch are generating (rank 0 sizes it
# down to keep a step short on a loaded machine: ``core.worker.batching.Chunks``), so
# their tokens keep coming while a context-sized prompt is read in (issue 33;
# ``make bench``'s ``shared_serve``).
PREFILL_STEP_BESIDE_STREAMS = 128
MAX_PROMPT_IDS = 1 << 21  # a generate command's ``tokens``: more than any model's context
MAX_GRAMMAR_CHARS = 1 << 24  # a generate command's ``grammar`` (the API's body is smaller)
MAX_TOP_LOGPROBS = 20  # a generate command's ``logprobs``: alternatives per token, as OpenAI
# The batching ranks' prompt cache (``--prompt-cache-mb``): conversations' KV caches kept
# between requests, at most this many MB a rank (``core.worker.promptcache``).
DEFAULT_PROMPT_CACHE_MB = 256
TRAFFIC_S = 0.5

# Environment the worker reads besides MLX's own (MLX_RANK, MLX_HOSTFILE, ...).
ENV_TELEMETRY = "MACMESH_TELEMETRY"  # "0" turns token events and traffic counting off
# "1": wait for the ``join`` command before joining the group. MLX's init blocks with the
# GIL held (no heartbeat) until every peer is there; joining once all are up keeps that
# silence short, so a rank that hangs before joining is the only one silent.
ENV_JOIN = "MACMESH_JOIN_WHEN_TOLD"
# The pid of the controller that started a local rank: the rank ends with it, whatever
# holds its GIL (``core.worker.lifeline``). Remote ranks end with their SSH session.
ENV_CONTROLLER = "MACMESH_CONTROLLER_PID"
