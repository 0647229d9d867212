"""The words every stage shares: strategy, backend, job state, loading stage, model source.

Standard library only (it travels with the worker to every node) and light to import,
so the GUI and the command line import it at the top instead of copying its values.
The values are what goes on the wire and into files; the words people read are the
front ends' (``gui/``, ``core/cli/``), never these.
"""

from __future__ import annotations

from enum import StrEnum


class Strategy(StrEnum):
    """How a model is spread over the ranks. ``AUTO`` is only ever a request: the
    planner turns it into one of the others."""

    AUTO = "auto"
    SINGLE = "single"  # one node holds the whole model
    PIPELINE = "pipeline"  # whole layers per node (capacity)
    TENSOR = "tensor"  # a slice of every layer per node (speed; talks every layer)


class Task(StrEnum):
    """What a job's ranks do."""

    CHAT = "chat"  # load a shard of the model, answer requests
    FINETUNE = "finetune"  # every rank the whole model: LoRA training, data parallel


class Backend(StrEnum):
    """MLX's distributed backend a job runs on. ``AUTO`` is only ever a request:
    preflight turns it into one of the others."""

    AUTO = "auto"
    SINGLE = "single"  # one rank: no group at all
    RING = "ring"  # TCP between neighbours (any network)
    JACCL = "jaccl"  # RDMA over Thunderbolt, full mesh
    JACCL_RING = "jaccl-ring"  # RDMA over Thunderbolt, a ring of cables

    @property
    def is_jaccl(self) -> bool:
        """RDMA over Thunderbolt: needs the device matrix and a coordinator."""
        return self in (Backend.JACCL, Backend.JACCL_RING)

    @property
    def is_ring(self) -> bool:
        """Collectives pass between neighbours only (traffic goes to rank ± 1)."""
        return self in (Backend.RING, Backend.JACCL_RING)


class ModelSource(StrEnum):
    """Where nodes lacking part of a model get it (the ``model_source`` setting,
    ``macmesh run --model-source``; preflight decides per node, ``core.run.checks.modelsource``).
    ``AUTO`` is only ever a request: each node ends with ``HUB`` or ``THIS_MAC``."""

    AUTO = "auto"  # the Hub when the node reaches it and the model came from there
    HUB = "hub"  # the node downloads its files from Hugging Face itself
    THIS_MAC = "this-mac"  # this Mac copies them over the network


class JobState(StrEnum):
    """Where a job stands, as the launcher reports it."""

    STARTING = "starting"
    LOADING = "loading"
    READY = "ready"
    GENERATING = "generating"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in (JobState.STOPPED, JobState.FAILED)


class LoadingStage(StrEnum):
    """What a rank is doing before it is ready, in order (the ``stage`` of its
    ``loading`` events and heartbeats)."""

    STARTING = "starting"  # the process is up, not yet in the group
    JOINING = "joining"  # waiting for every rank to join the distributed group
    READING = "reading"  # reading the model's config and weight index
    SLICING = "slicing"  # tensor: cutting every layer into this rank's part
    PLACING = "placing"  # pipeline: keeping only this rank's layers
    WEIGHTS = "weights"  # reading this rank's weights into memory
    SYNCHRONISING = "synchronising"  # waiting for every rank to have loaded

    @property
    def step(self) -> int:
        """Its place in the sequence, for a progress bar (0 first)."""
        return list(LoadingStage).index(self)
