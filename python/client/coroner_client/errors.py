"""Typed errors: one class per gRPC status coronerd answers (docs/API.md says which).

``Unavailable`` and ``ResourceExhausted`` are worth retrying later (``retryable`` is true):
coronerd, its database or its index is down or busy, or a limit refused the request for now.
The others are about the request itself and will fail again unchanged.
"""

import grpc


class CoronerError(Exception):
    """coronerd refused or failed a call; ``code`` is the gRPC status, ``details`` its message."""

    retryable = False

    def __init__(self, code, details):
        super().__init__(f"coronerd answered {code.name}: {details}" if details else f"coronerd answered {code.name}")
        self.code = code
        self.details = details


class Unavailable(CoronerError):
    """coronerd, its database or its index cannot be reached now: retry later."""

    retryable = True


class ResourceExhausted(CoronerError):
    """A limit of coronerd refused the request (the message names the flag): retry later or ask for less."""

    retryable = True


class NotFound(CoronerError):
    """No such job (or snapshot) on this coronerd."""


class InvalidArgument(CoronerError):
    """The request is malformed: a bad job id, query or page token."""


class Unauthenticated(CoronerError):
    """No token, or the wrong one: pass ``token=`` (the read token)."""


class PermissionDenied(CoronerError):
    """The token does not allow this call."""


class FailedPrecondition(CoronerError):
    """Another coronerd instance owns the job (its address is in the message)."""


_BY_CODE = {
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
}


def from_rpc_error(e):
    """The typed error for a ``grpc.RpcError``."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else str(e)
    return _BY_CODE.get(code, CoronerError)(code, details or "")
