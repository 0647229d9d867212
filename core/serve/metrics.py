"""``GET /metrics``: the API's figures in Prometheus's text format, for Grafana and the like
(a Mac in a server room is watched there, not in a window).

Built with ``prometheus_client`` and its text exposition, on a registry of each server's
own (never the process-wide default one: the window may serve, stop and serve again, and
tests run many servers in one process). No figure is worked out here a second time: each
comes from where the window and the run history read it.

- requests by status: counted as each response ends (``app.Logged``, which logs it);
- the queue and the running batch: the ``Answerer``'s own ``depth`` and ``serving``, read at
  each scrape (the Run pane's "serving N at once · M waiting");
- tokens in, out and from the prompt cache, time to first token and tokens/s: each answer's
  figures as the history keeps them (``core.run.measure.telemetry.AnswerFigures``, handed
  over by ``core.serve.records.ApiRecords`` when its ``done`` arrives);
- each link's bytes and each rank's memory: the ``Telemetry`` the records keep (the same
  class, fed the same events, as the window's plots), read at each scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.run.measure.telemetry import AnswerFigures, Telemetry
from core.serve.answers import Answerer

CONTENT_TYPE = CONTENT_TYPE_LATEST
PATH = "/metrics"
# Seconds to the first token: a warm demo rank answers in tenths, a 20,000-token prefill
# on a big model in tens of seconds.
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Tokens/s of one answer: a few on a CPU demo rank, hundreds on a small model on a GPU.
RATE_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)


class ServeMetrics:
    """One server's metrics. ``request_ended`` and ``answered`` are called as things
    happen (any thread: prometheus_client's metrics are thread-safe); the queue, the batch,
    the links and the memory are read when scraped (``exposition``)."""

    def __init__(self, answers: Answerer, telemetry: Callable[[], Telemetry | None]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "macmesh_api_requests",
            "HTTP requests answered by the API, by status (499: the client left first); "
            "scrapes of /metrics are not counted",
            ["status"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            "macmesh_api_prompt_tokens", "Prompt tokens of the answers given", registry=r
        )
        self.generation_tokens = Counter(
            "macmesh_api_generation_tokens", "Tokens generated in the answers given", registry=r
        )
        self.cached_tokens = Counter(
            "macmesh_api_cached_tokens",
            "Prompt tokens the ranks' prompt cache held (not prefilled again)",
            registry=r,
        )
        self.ttft = Histogram(
            "macmesh_api_ttft_seconds",
            "Time from sending a request to the ranks to its first token, as seen here",
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tokens_per_s = Histogram(
            "macmesh_api_generation_tokens_per_second",
            "Each answer's generation speed, as every surface shows it (tokens after the "
            "first over the time since the first)",
            buckets=RATE_BUCKETS,
            registry=r,
        )
        r.register(_Live(answers, telemetry))

    def request_ended(self, path: str, status: int) -> None:
        if path != PATH:
            self.requests.labels(status=str(status)).inc()

    def answered(self, figures: AnswerFigures) -> None:
        """One answer's figures (``AnswerFigures``): its tokens, TTFT and speed."""
        self.prompt_tokens.inc(figures.prompt_tokens or 0)
        self.generation_tokens.inc(figures.generation_tokens)
        self.cached_tokens.inc(figures.cached_tokens)
        if figures.ttft_s is not None:
            self.ttft.observe(figures.ttft_s)
        if figures.generation_tps is not None and figures.generation_tokens:
            self.tokens_per_s.observe(figures.generation_tps)

    def exposition(self) -> bytes:
        """The text format every Prometheus scraper reads."""
        return generate_latest(self.registry)


class _Live(Collector):
    """What is read at each scrape rather than counted as it happens."""

    def __init__(self, answers: Answerer, telemetry: Callable[[], Telemetry | None]) -> None:
        self.answers, self.telemetry = answers, telemetry

    def collect(self) -> Iterator[Metric]:
        answers = self.answers
        yield GaugeMetricFamily(
            "macmesh_api_waiting", "Requests waiting in line for the ranks", answers.depth
        )
        yield GaugeMetricFamily(
            "macmesh_api_running",
            "Requests the ranks generate now (the running batch)",
            answers.serving,
        )
        yield GaugeMetricFamily(
            "macmesh_api_running_limit",
            "Requests the ranks may generate at once (their batch)",
            answers.max_running,
        )
        links = CounterMetricFamily(
            "macmesh_link_bytes",
            "Bytes moved over each link between two ranks while the API serves, both ways, "
            "as the senders counted them",
            labels=["link"],
        )
        memory = GaugeMetricFamily(
            "macmesh_rank_memory_bytes",
            "Each rank's memory: the most it reported, after loading or at its peak",
            labels=["rank"],
        )
        telemetry = self.telemetry()
        if telemetry is not None:
            for link, sent in telemetry.link_totals().items():
                links.add_metric([link], sent)
            for rank, used in telemetry.memory().items():
                memory.add_metric([str(rank)], used)
        yield links
        yield memory
