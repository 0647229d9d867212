"""Each model's own plan when ``macmesh serve`` serves several (issue 37): a strategy and
a set of Macs, so two models can run side by side on different Macs.

On the command line, after the model (``--model`` or ``--loadable``)::

    PATH@STRATEGY            its strategy (auto, single, pipeline, tensor), every Mac
    PATH@STRATEGY:MACS       its strategy on these Macs
    PATH@:MACS               --strategy on these Macs

MACS is a comma-separated list: on the demo the simulated Macs' numbers (``1,2``: Studio A
and B), with ``--hosts`` host names or addresses written there (``studio-a,studio-b``; an
entry of ``--hosts`` as written, or its host alone). A model folder whose own name has an
``@`` is taken whole when it exists.

In a models file each model may say ``"strategy"``, ``"hosts"`` (a list out of
``--hosts``) or, on the demo, ``"nodes"`` (which simulated Macs, ``[1, 3]``, or how many,
``2``: the first two). Nothing said: ``--strategy`` on every Mac. Every choice is checked
before anything loads; a wrong one is one line naming it.

Pure: text and lists in, an ``OwnPlan`` and the Macs chosen out (``ValueError`` in words).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from core.cluster.hosts import parse_host
from core.worker.vocab import Strategy

STRATEGIES = (Strategy.AUTO, Strategy.SINGLE, Strategy.PIPELINE, Strategy.TENSOR)
WORDS = ", ".join(STRATEGIES)
# The model, then "@" with a strategy and/or ":" and the Macs (the first such "@").
_SUFFIX = re.compile(r"^(?P<model>.+?)@(?P<strategy>[a-z]*)(?::(?P<macs>.*))?$")
MAX_MACS_TEXT = 4096

T = TypeVar("T")


@dataclass(frozen=True)
class OwnPlan:
    """What a model says of its own plan; None and () mean "as the command line says"."""

    strategy: Strategy | None = None
    macs: tuple[str, ...] = ()  # as written: the demo's numbers, or --hosts entries
    count: int | None = None  # the demo: the first ``count`` simulated Macs

    def describe(self) -> str:
        macs = ",".join(self.macs) if self.macs else f"first {self.count}" if self.count else ""
        return f"{self.strategy or ''}{':' + macs if macs else ''}"


def split_model(text: str) -> tuple[str, OwnPlan]:
    """``PATH[@STRATEGY][:MACS]`` as the model and its own plan (see the module doc)."""
    match = _SUFFIX.match(text)
    if "@" not in text or Path(text).exists():
        return text, OwnPlan()
    if match is None or (not match["strategy"] and match["macs"] is None):
        raise ValueError(
            f"--model {text}: after @ comes a strategy ({WORDS}) and/or :MACS, "
            "e.g. MODEL@pipeline:1,2"
        )
    try:
        strategy = strategy_of(match["strategy"]) if match["strategy"] else None
    except ValueError as error:
        raise ValueError(f"--model {text}: {error}") from None
    macs: tuple[str, ...] = ()
    if match["macs"] is not None:
        macs = tuple(m.strip() for m in match["macs"][:MAX_MACS_TEXT].split(","))
        if not all(macs):
            raise ValueError(f"--model {text}: name the Macs after ':', separated by commas")
    return match["model"], OwnPlan(strategy, macs)


def strategy_of(value: Any) -> Strategy:
    if not isinstance(value, str) or value not in STRATEGIES:
        shown = repr(value)[:40]
        raise ValueError(f"strategy {shown} is not one of {WORDS}")
    return Strategy(value)


def plan_of_item(item: dict[str, Any], demo: bool) -> OwnPlan:
    """A models file's entry's own plan (``strategy``, ``hosts``, ``nodes``)."""
    strategy = strategy_of(item["strategy"]) if "strategy" in item else None
    if "hosts" in item and "nodes" in item:
        raise ValueError('"hosts" (real Macs) and "nodes" (the demo\'s) contradict: keep one')
    if "hosts" in item:
        if demo:
            raise ValueError('"hosts" is for --hosts; on the demo say "nodes": [1, 2]')
        hosts = item["hosts"]
        if not isinstance(hosts, list) or not hosts or not all(_text(h) for h in hosts):
            raise ValueError('"hosts" must be a list of host names out of --hosts')
        return OwnPlan(strategy, tuple(hosts))
    if "nodes" in item:
        if not demo:
            raise ValueError('"nodes" is for the demo\'s simulated Macs; with --hosts say "hosts"')
        nodes = item["nodes"]
        if isinstance(nodes, int) and not isinstance(nodes, bool):
            return OwnPlan(strategy, count=nodes)
        if not isinstance(nodes, list) or not nodes or not all(_number(n) for n in nodes):
            raise ValueError('"nodes" must be a list of the demo\'s Mac numbers, or a count')
        return OwnPlan(strategy, tuple(str(n) for n in nodes))
    return OwnPlan(strategy)


def demo_macs(own: OwnPlan, facts: Sequence[T], names: Sequence[str]) -> list[T]:
    """The simulated Macs (``facts``, named ``names``, numbered from 1) ``own`` chooses."""
    total = len(facts)
    if own.count is not None:
        if not 1 <= own.count <= total:
            raise ValueError(f"{own.count} Macs asked for; the demo has {total} (--nodes)")
        return list(facts[: own.count])
    if not own.macs:
        return list(facts)
    chosen: list[int] = []
    for mac in own.macs:
        number = int(mac) if mac.isdigit() and len(mac) < 4 else 0
        if not 1 <= number <= total:
            shown = mac[:40]
            raise ValueError(
                f"Mac {shown!r}: the demo's Macs are 1 to {total} "
                f"({', '.join(names)}; --nodes {total})"
            )
        if number - 1 in chosen:
            raise ValueError(f"Mac {number} is named twice")
        chosen.append(number - 1)
    return [facts[i] for i in sorted(chosen)]


def chosen_hosts(own: OwnPlan, hosts: Sequence[str]) -> list[str]:
    """The entries of ``--hosts`` (``hosts``, as written) ``own`` names: each either as
    written there or by its host alone (one entry only)."""
    if own.count is not None:
        raise ValueError('"nodes" is for the demo\'s simulated Macs; with --hosts say "hosts"')
    if not own.macs:
        return list(hosts)
    chosen: list[str] = []
    for mac in own.macs:
        found = [h for h in hosts if h.strip() == mac] or [h for h in hosts if _host(h) == mac]
        if len(found) != 1:
            shown = mac[:80]
            why = "is not in" if not found else "matches several entries of"
            raise ValueError(
                f"{shown} {why} --hosts ({', '.join(hosts)}): name it as written there"
            )
        if found[0] in chosen:
            raise ValueError(f"{mac[:80]} is named twice")
        chosen.append(found[0])
    return [h for h in hosts if h in chosen]


def _host(text: str) -> str | None:
    try:
        return parse_host(text).host
    except ValueError:
        return None


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 300


def _number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1000
