"""Metric events and the resuming StreamMetrics iterator."""
from __future__ import annotations

import datetime
import random
import threading
import time
from typing import Any, Dict, Iterator, Optional

import grpc

from ._errors import AmpdError
from ._proto import training_service_pb2

_JobState = training_service_pb2.JobState

#: Event kinds, after the MetricsEvent oneof: a training step, an evaluation,
#: a skipped step (inf/NaN gradients), a state change, a heartbeat (queued
#: jobs), a line of the job's own log (checkpoints, restarts, device memory),
#: an FP8 job's scaling record (every FP8 tensor's scale and amax).
KINDS = ("step", "eval", "skip", "state", "heartbeat", "log", "fp8")
_KIND_OF_FIELD = {"step_record": "step", "eval": "eval", "skip": "skip", "state": "state",
                  "heartbeat": "heartbeat", "log": "log", "fp8_scaling": "fp8"}

# Codes that mean the stream broke rather than that the request was wrong. A
# connection that drops mid-stream surfaces as UNAVAILABLE, or as INTERNAL /
# UNKNOWN ("Stream removed", RST_STREAM), or CANCELLED when the call was cut.
_RESUMABLE = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED,
})


class Event:
    """One MetricsEvent.

    kind: "step" | "eval" | "skip" | "state" | "heartbeat" | "log" | "fp8"; step:
    the step it belongs to; record: the StepRecord / EvalRecord / SkipRecord /
    StateChange / Heartbeat / LogRecord / Fp8ScalingRecord; raw: the MetricsEvent. The record's fields read through:
    event.loss, event.accuracy, event.loss_scale, ...; event.state is the state
    name ("RUNNING") for state events and None otherwise.
    """

    __slots__ = ("kind", "step", "record", "raw")

    def __init__(self, raw: training_service_pb2.MetricsEvent):
        field = raw.WhichOneof("event")
        self.raw = raw
        self.kind = _KIND_OF_FIELD.get(field, field or "")
        self.step = raw.step
        self.record = getattr(raw, field) if field else None

    @property
    def state(self) -> Optional[str]:
        if self.kind != "state":
            return None
        return _JobState.Name(self.record.state)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in Event.__slots__:
            raise AttributeError(name)
        record = self.record
        if record is not None and name in record.DESCRIPTOR.fields_by_name:
            return getattr(record, name)
        raise AttributeError("%s event has no field %r" % (self.kind, name))

    def to_dict(self) -> Dict[str, Any]:
        """{"kind", "step", and the record's fields}: plain Python values, enum
        names for enums, timezone-aware datetimes for timestamps."""
        out: Dict[str, Any] = {"kind": self.kind}
        if self.record is not None:
            out.update(_plain(self.record))
        out["step"] = self.step
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Event) and self.raw == other.raw

    def __hash__(self) -> int:
        return hash(self.raw.SerializeToString(deterministic=True))

    def __repr__(self) -> str:
        if self.kind == "step":
            r = self.record
            return "<Event step %d loss=%.5g lr=%.3g loss_scale=%g%s>" % (
                r.step, r.loss, r.lr, r.loss_scale, " skipped" if r.skipped else "")
        if self.kind == "eval":
            if self.record.tokens:  # a language model's: val loss, bits per byte
                return "<Event eval %d loss=%.5g bits_per_byte=%.4f>" % (
                    self.step, self.record.loss, self.record.bits_per_byte)
            return "<Event eval %d loss=%.5g accuracy=%.4f>" % (
                self.step, self.record.loss, self.record.accuracy)
        if self.kind == "state":
            reason = self.record.reason
            return "<Event state %s at step %d%s>" % (self.state, self.step,
                                                    " (%s)" % reason if reason else "")
        if self.kind == "skip":
            return "<Event skip %d %s>" % (self.step, self.record.reason)
        if self.kind == "heartbeat":
            return "<Event heartbeat queue_position=%d>" % self.record.queue_position
        if self.kind == "log":
            return "<Event log %s at step %d: %s>" % (
                training_service_pb2.LogRecord.Severity.Name(self.record.severity)[9:],
                self.step, self.record.message)
        return "<Event %s>" % self.kind


def _plain(message) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.enum_type is not None:
            value = field.enum_type.values_by_number[value].name \
                if value in field.enum_type.values_by_number else value
        elif field.message_type is not None:
            if not message.HasField(field.name):
                value = None
            elif field.message_type.full_name == "google.protobuf.Timestamp":
                value = value.ToDatetime(tzinfo=datetime.timezone.utc)
            else:
                value = _plain(value)
        out[field.name] = value
    return out


class MetricsStream:
    """Iterates a job's metric events, from the start (or after `since_step`)
    until the job's terminal state, and reconnects by itself when the stream
    breaks (the server restarting its listener, a dropped connection, a proxy
    timing out), yielding every event exactly once and in order.

    Resuming: the server replays the events with step > since_step. Several
    events can share a step (a step, its evaluation, a state change), so the
    stream asks for everything from the highest step it has seen (since_step =
    that step - 1) and drops the events it already yielded; no gap, no duplicate.

    reconnects counts the resumptions; last_step is the highest step seen.
    Heartbeats (sent to queued jobs) are yielded only with heartbeats=True.
    """

    def __init__(self, client, name: str, since_step: int = 0, *, heartbeats: bool = False,
                 reconnect: bool = True, reconnect_timeout: float = 60.0,
                 deadline: Optional[float] = None):
        if since_step < 0:
            raise ValueError("since_step must be >= 0")
        self._client = client
        self.name = name
        self.since_step = since_step
        self.heartbeats = heartbeats
        self.reconnect = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.reconnects = 0
        self.last_step = since_step
        self._deadline = deadline
        self._call = None
        self._lock = threading.Lock()
        self._closed = False
        self._gen = self._run()

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        return next(self._gen)

    def close(self) -> None:
        """Stops the stream (from any thread); iteration ends."""
        with self._lock:
            self._closed = True
            call = self._call
        if call is not None:
            call.cancel()
        try:
            self._gen.close()
        except ValueError:  # iterating in another thread: the cancel ends it there
            pass

    cancel = close

    def __enter__(self) -> "MetricsStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _drop(self) -> None:
        """Cuts the current call as a lost connection would; the stream resumes.
        For tests of the resumption."""
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()

    def _run(self) -> Iterator[Event]:
        request_since = self.since_step
        skip = 0  # replayed events already yielded
        received = 0  # events yielded (heartbeats aside)
        max_step = None  # the highest step among them ...
        first_at_max = 0  # ... and the index of the first event that reached it
        failing_since = None
        delay = 0.05
        stub = self._client._training
        while True:
            timeout = None
            if self._deadline is not None:
                timeout = self._deadline - time.monotonic()
                if timeout <= 0:
                    raise TimeoutError("timed out waiting for %s" % self.name)
            request = training_service_pb2.StreamMetricsRequest(name=self.name,
                                                                 since_step=request_since)
            with self._lock:
                if self._closed:
                    return
                call = stub.StreamMetrics(request, timeout=timeout,
                                          metadata=self._client._metadata)
                self._call = call
            try:
                for raw in call:
                    failing_since, delay = None, 0.05
                    if raw.WhichOneof("event") == "heartbeat":
                        if self.heartbeats:
                            yield Event(raw)
                        continue
                    if skip:
                        skip -= 1
                        continue
                    if max_step is None or raw.step > max_step:
                        max_step, first_at_max = raw.step, received
                        self.last_step = max(self.last_step, raw.step)
                    received += 1
                    yield Event(raw)
                return  # the server ended the stream after the terminal state
            except grpc.RpcError as e:
                code = e.code()
                if self._closed:
                    return
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and self._deadline is not None:
                    # The call's deadline is ours (gRPC's clock may fire a hair early).
                    raise TimeoutError("timed out waiting for %s" % self.name) from None
                if not self.reconnect or code not in _RESUMABLE:
                    raise AmpdError.from_rpc_error(e, "StreamMetrics") from None
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.reconnect_timeout:
                    raise AmpdError.from_rpc_error(e, "StreamMetrics") from None
            finally:
                call.cancel()
                with self._lock:
                    self._call = None
            # Resume. The server starts at the first recorded event with
            # step > since_step (since_step 0: the very first event).
            if max_step is None:
                request_since, skip = self.since_step, 0
            elif max_step <= self.since_step:
                # Only the terminal event the server repeats to a client that
                # asked past the end; it is sent again, alone.
                request_since, skip = self.since_step, received
            elif max_step - 1 <= 0:
                request_since, skip = 0, received
            else:
                # All events before the first one at max_step have smaller
                # steps (max_step was new there), so the replay starts there.
                request_since, skip = max_step - 1, received - first_at_max
            self.reconnects += 1
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2.0)
