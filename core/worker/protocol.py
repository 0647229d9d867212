"""The worker's wire format: JSON lines, one object per line.

This module is the contract between a rank (``core.worker``) and the
controller (``core.run.job.launcher``, ``core.run.measure.telemetry``). It uses the standard
library only, so it travels with the worker to any node.

Controller -> every rank, the same lines in the same order, on each rank's
stdin (an idle rank waits on a pipe, not inside a spinning MLX collective;
stdin closing tells a rank its controller is gone)::

    {"op": "generate", "id": "r1", "prompt": "...", "max_tokens": 64, "chat": true,
     "temperature": 0.0, "top_p": 1.0, "seed": 7, "stop": ["Q:"]}   (sampling optional)
    (optional: "tokens": [1, 2, ...], the prompt's ids as the controller rendered and
     tokenized it, used instead of prompt/messages; "tenant": "key_ab12cd34", whose prompt
     cache entries the request may reuse and keep, none: the common ones; "grammar": an
     llguidance grammar the answer must follow; "json_object": true, that grammar is any
     JSON object, closed within max_tokens; "logprobs": 0-20, report each token's
     log-probability and that many alternatives: ``core.worker.constrain``)
    {"op": "cancel", "id": "r1"}   (end that answer at its next token: done, "cancelled")
    {"op": "link_test", "id": "t1", "sizes": [4096, 67108864], "pairs": [[0, 1]], "scale": 1}
    {"op": "stop"}
    {"op": "join"}          (once every rank is up: join the group now; see ENV_JOIN)

Every rank -> controller, on stdout (logs go to stderr). Every event carries
``event`` (its kind), ``rank`` and ``t``: ``time.monotonic()`` on the rank's
host, so intervals between events of one rank are exact; never compare ``t``
across hosts.

==========  =====================================================================
event       fields
==========  =====================================================================
hello       size, backend, strategy (``vocab`` values), pid, host
loading     stage (a ``vocab.LoadingStage`` value: "joining", "reading", "weights", ...)
loaded      load_s, memory_bytes, layers ([start, end) or null for tensor), strategy,
            device ("cpu" or "gpu"), blas (on the CPU: {name, path, threads, gflops, fast};
            else null), ring_wait (on the CPU: whether its ring waits sleep, from
            ``core.worker.ringwait``; else null), memory_measure ("anonymous resident" on
            Linux, "physical footprint" on a Mac, null when unmeasured), base_bytes (what the
            rank held before reading a weight), peak_load_bytes (the most it held while
            loading; ``core.worker.residency``), weights ({precision, dequantized[,
            from][, reason][, layout ({"OUTxIN" or "head OUTxIN": "rows of 512: 150 vs
            404 µs", "transposed: ..." or "as is: ..."})]})[, adapter
            ({name, type, fused, precision}: the adapter fused in, with --adapter)]
ready       (rank 0, once every rank has loaded and synchronised)
token       request, index (0-based), token (id), text (the new piece of text; empty for
            the end-of-sequence token: one event per generated token)[, logprobs
            (asked for: OpenAI's {token, logprob, bytes, top_logprobs})]
done        request, prompt_tokens, prompt_tps, generation_tokens, generation_tps,
            ttft_s, finish_reason ("stop", "length" or "cancelled"), peak_memory_bytes (MLX's),
            peak_generation_bytes (the process's most since loaded, as peak_load_bytes), text
            [, cached_tokens (batching ranks: the prompt's tokens the prompt cache held)]
            [, logprobs (asked for: the token events' logprobs, in order)]
traffic     interval_s, sent ({peer rank: bytes}), received ({peer rank: bytes})
heartbeat   (every HEARTBEAT_S from the rank's first line, so silence means a hang);
            stage (the ``loading`` stage, until the rank has loaded), peak_bytes (the most
            the rank held while loading, until loaded; since loaded, after; absent where
            unmeasured)
link_test   request, size (ranks), links ([{a, b, points: [{bytes, seconds (one way),
            bytes_per_s}]}]), all_sum ([{bytes, seconds, bytes_per_s (bus bandwidth)}])[,
            cancelled (true: the ranks agreed to stop at a size's end; links empty)]
link_progress (rank 0, during a link test) request, done, total (steps: a pair at a size,
            or the all_sum at a size), bytes, pair ([a, b] or null), elapsed_s
train       (fine-tune; every rank, every ``steps_per_report`` iterations) iteration, iters,
            train_loss (the group's mean), learning_rate, tokens_per_s (the group's trained
            tokens/s), trained_tokens (the group's, so far), peak_memory_bytes (this rank's)
validation  (fine-tune; rank 0) iteration, val_loss
checkpoint  (fine-tune; rank 0) iteration, path (the adapter file on rank 0's node)
trained     (fine-tune; rank 0, once training ended or was stopped) adapter (the adapter
            folder on rank 0's node), iterations, train_loss, val_loss (or null),
            stopped (true when a stop command ended it before ``iters``)
error       message (for a person: what happened and what to do), fatal,
            request (when it answers one request: that request failed, the job lives on),
            code (for a refused request, when known: "context_length_exceeded")
stopped     (the rank is exiting cleanly) peak_generation_bytes (once loaded: its most since)
==========  =====================================================================

In code each kind is a ``TypedDict`` (``Event`` is their union) and so is each command
(``Command``). The worker makes each event typed and writes it (``EventWriter.write(
Token(...))``), so mypy checks what a rank sends; ``parse_event`` is the one place a line
becomes an ``Event`` and ``parse_command`` a ``Command``, both through one machinery
(``core.worker.typedjson``); a reader that narrows on the kind (``if event["event"] ==
TOKEN:``) reads typed fields.
"""

from __future__ import annotations

# The wire, split by concern (a thin re-export: every ``protocol.X`` still works): the
# events (``core.worker.events``), the commands (``core.worker.commands``) and the
# worker's settings (``core.worker.settings``).
from core.worker.commands import *  # noqa: F403
from core.worker.events import *  # noqa: F403
from core.worker.events import _Stamp as _Stamp
from core.worker.settings import *  # noqa: F403
