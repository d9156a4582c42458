"""AmpdError: a failed call, with the google.rpc details ampd attaches."""
from __future__ import annotations

from typing import Any, List, NamedTuple, Optional

import grpc
from google.rpc import error_details_pb2, status_pb2

_DETAILS_KEY = "grpc-status-details-bin"
_DETAIL_TYPES = (
    error_details_pb2.BadRequest,
    error_details_pb2.ResourceInfo,
    error_details_pb2.QuotaFailure,
    error_details_pb2.PreconditionFailure,
    error_details_pb2.ErrorInfo,
    error_details_pb2.RetryInfo,
    error_details_pb2.DebugInfo,
    error_details_pb2.Help,
    error_details_pb2.LocalizedMessage,
    error_details_pb2.RequestInfo,
)


class FieldViolation(NamedTuple):
    field: str  # e.g. "spec.training.batch_size"
    description: str


class Violation(NamedTuple):
    subject: str
    description: str
    type: str = ""


class AmpdError(Exception):
    """A call to ampd failed.

    code: the grpc.StatusCode (code_name: "INVALID_ARGUMENT", ...); message: the
    server's message; details: the google.rpc detail messages it attached
    (BadRequest, ResourceInfo, QuotaFailure, PreconditionFailure, ...);
    field_violations: BadRequest's [FieldViolation(field, description)].
    """

    def __init__(self, code: grpc.StatusCode, message: str, details: Optional[List[Any]] = None,
                 method: str = ""):
        self.code = code
        self.message = message
        self.details = list(details or [])
        self.method = method
        super().__init__(str(self))

    @property
    def code_name(self) -> str:
        return self.code.name

    @property
    def field_violations(self) -> List[FieldViolation]:
        return [FieldViolation(v.field, v.description)
                for d in self.details if isinstance(d, error_details_pb2.BadRequest)
                for v in d.field_violations]

    @property
    def fields(self) -> List[str]:
        """The fields BadRequest names, in order."""
        return [v.field for v in self.field_violations]

    def violation(self, field: str) -> Optional[str]:
        """The description of the violation of `field`, or None."""
        for v in self.field_violations:
            if v.field == field:
                return v.description
        return None

    @property
    def violations(self) -> List[Violation]:
        """QuotaFailure and PreconditionFailure violations."""
        out = []
        for d in self.details:
            if isinstance(d, error_details_pb2.QuotaFailure):
                out += [Violation(v.subject, v.description) for v in d.violations]
            elif isinstance(d, error_details_pb2.PreconditionFailure):
                out += [Violation(v.subject, v.description, v.type) for v in d.violations]
        return out

    @property
    def resource(self) -> Optional[error_details_pb2.ResourceInfo]:
        for d in self.details:
            if isinstance(d, error_details_pb2.ResourceInfo):
                return d
        return None

    def __str__(self) -> str:
        text = "%s: %s" % (self.code.name, self.message or "(no message)")
        missing = [v for v in self.field_violations if v.field not in self.message]
        if missing:
            text += " [" + "; ".join("%s: %s" % v for v in missing) + "]"
        return text

    def __repr__(self) -> str:
        return "%s(%s, %r)" % (type(self).__name__, self.code.name, self.message)

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError, method: str = "") -> "AmpdError":
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        message = (error.details() if hasattr(error, "details") else str(error)) or ""
        details: List[Any] = []
        trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
        for key, value in trailers or ():
            if key != _DETAILS_KEY:
                continue
            status = status_pb2.Status()
            try:
                status.ParseFromString(value)
            except Exception:  # noqa: BLE001 - a malformed trailer must not hide the error
                continue
            message = status.message or message
            for any_detail in status.details:
                details.append(_unpack(any_detail))
        subclass = _BY_CODE.get(code, cls)
        return subclass(code, message, details, method)


def _unpack(any_detail):
    for t in _DETAIL_TYPES:
        if any_detail.Is(t.DESCRIPTOR):
            msg = t()
            any_detail.Unpack(msg)
            return msg
    return any_detail  # an unknown detail type, left packed


class InvalidArgumentError(AmpdError):
    """INVALID_ARGUMENT: see field_violations."""


class NotFoundError(AmpdError):
    """NOT_FOUND: see resource."""


class FailedPreconditionError(AmpdError):
    """FAILED_PRECONDITION: e.g. deleting a running job; see violations."""


class ResourceExhaustedError(AmpdError):
    """RESOURCE_EXHAUSTED: a server limit; see violations."""


class UnavailableError(AmpdError):
    """UNAVAILABLE: the server cannot be reached (or is shutting down)."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
}


class SpecError(ValueError):
    """A job spec (or model / precision spec) that cannot be read or parsed."""


class JobFailedError(Exception):
    """Raised by Job.wait(raise_on_failure=True) when the job did not succeed."""

    def __init__(self, job):
        self.job = job
        reason = job.failure_reason
        super().__init__("job %s ended %s%s" % (job.id, job.state, ": " + reason if reason else ""))
