"""Every refusal as OpenAI's JSON error shape, with the status code OpenAI would use."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """A request the API refuses: ``status`` and OpenAI's ``{"error": {...}}`` fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.kind, self.param, self.code = kind, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key")


def not_found(message: str, code: str | None = None, param: str | None = None) -> APIError:
    return APIError(404, message, param=param, code=code)


def queue_full(retry_after_s: int, depth: int) -> APIError:
    return APIError(
        429,
        f"The cluster's queue is full ({depth} requests waiting); retry in {retry_after_s} s.",
        kind="rate_limit_error",
        code="queue_full",
        headers={"Retry-After": str(retry_after_s)},
    )


def unavailable(message: str) -> APIError:
    return APIError(503, message, kind="server_error", code="cluster_unavailable")
