"""The Hub's network failures in words (issue 25 item 15): no raw "[Errno -2]", and
huggingface_hub's retry warnings said once, not twice."""

from __future__ import annotations

import logging
import socket

import pytest

from core.library.hub import HubError, hub_errors, network_reason, search_models


def _raised(error: BaseException) -> str:
    with pytest.raises(HubError) as raised, hub_errors(None, "https://huggingface.co"):
        raise error
    return str(raised.value)


def test_an_offline_name_lookup_is_said_in_words() -> None:
    lookup = socket.gaierror(-2, "Name or service not known")
    message = _raised(lookup)
    assert message.startswith("Cannot reach Hugging Face at https://huggingface.co (")
    assert "is this computer offline?" in message
    assert "Errno" not in message and "-2" not in message


def test_a_wrapped_lookup_failure_is_found_among_the_causes() -> None:
    import httpx2

    try:
        try:
            raise socket.gaierror(8, "nodename nor servname provided, or not known")  # macOS
        except socket.gaierror as lookup:
            raise httpx2.ConnectError("[Errno 8] nodename nor servname provided") from lookup
    except httpx2.ConnectError as error:
        message = _raised(error)
    assert "is this computer offline?" in message and "Errno" not in message


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (ConnectionRefusedError(111, "Connection refused"), "the connection was refused"),
        (TimeoutError("timed out"), "it did not answer in time"),
        (OSError(113, "No route to host"), "No route to host"),
    ],
)
def test_other_network_failures_lose_their_errno(error: OSError, words: str) -> None:
    assert network_reason(error) == words
    assert "Errno" not in _raised(error)


def test_huggingface_hub_warnings_reach_the_log_once(
    tiny_closed_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every retry was logged twice: by huggingface_hub's own stderr handler and by the
    root logger it passes it on to."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    # huggingface_hub read HF_HUB_OFFLINE at its import (make test exports 1): online here.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    root = logging.getLogger()
    keep = Keep(logging.WARNING)
    root.addHandler(keep)
    try:
        from huggingface_hub.utils import _http

        monkeypatch.setattr(_http.time, "sleep", lambda _s: None)  # the retries, at once
        with pytest.raises(HubError, match=r"the connection was refused"):
            search_models("tiny", endpoint=tiny_closed_endpoint)
    finally:
        root.removeHandler(keep)
    hub_logger = logging.getLogger("huggingface_hub")
    assert not [h for h in hub_logger.handlers if type(h) is logging.StreamHandler]
    assert hub_logger.propagate  # what it says still reaches the app's log
    retries = [r for r in records if r.name.startswith("huggingface_hub")]
    assert retries, "huggingface_hub retried without a word"


@pytest.fixture
def tiny_closed_endpoint() -> str:
    """A loopback address where nothing listens (the discard port)."""
    return "http://127.0.0.1:9"
