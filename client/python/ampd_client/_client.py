"""Client and Job: a thin wrapper over ampd's TrainingService and PrecisionService."""
from __future__ import annotations

import os
import time
import uuid
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from . import precision as _precision
from ._errors import AmpdError, JobFailedError
from ._events import MetricsStream
from ._generate import Generation, generate_request
from ._proto import (job_spec_pb2, precision_service_pb2, precision_service_pb2_grpc,
                     training_service_pb2, training_service_pb2_grpc)
from ._specs import is_model_spec, job_spec, model_spec

DEFAULT_TARGET = "localhost:50051"
TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
_JobState = training_service_pb2.JobState

# Reconnect quickly after a lost connection (gRPC's defaults back off to 2 min).
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


def _job_name(job: Any) -> str:
    if isinstance(job, Job):
        return job.name
    if isinstance(job, training_service_pb2.Job):
        return job.name
    name = str(job)
    return name if name.startswith("jobs/") else "jobs/" + name


def _profile_name(profile_id: str) -> str:
    return profile_id if profile_id.startswith("profiles/") else "profiles/" + profile_id


def _state_value(state: Union[str, int]) -> int:
    if isinstance(state, int):
        _JobState.Name(state)  # ValueError when unknown
        return state
    try:
        return _JobState.Value(str(state).upper())
    except ValueError:
        raise ValueError("unknown job state %r (one of %s)" % (
            state, ", ".join(n for n in _JobState.keys() if n != "JOB_STATE_UNSPECIFIED"))) from None


class Client:
    """A connection to one ampd server.

        client = Client()                    # $AMPD_SERVER, else localhost:50051
        job = client.submit("examples/fashion_mlp_bf16.json")
        for event in job.metrics(): ...
        job.wait()

    timeout: seconds for each unary call (None: no deadline). Calls that are
    safe to repeat are retried a few times when the server is unreachable.
    Failed calls raise AmpdError (see its subclasses).

    Security (see the README): token is sent as "authorization: Bearer TOKEN"
    (default $AMPD_TOKEN); tls_ca (PEM path of the server's CA, default
    $AMPD_TLS_CA) switches to TLS; tls_cert/tls_key add a client certificate
    for mTLS (default $AMPD_TLS_CERT/$AMPD_TLS_KEY).
    """

    def __init__(self, target: Optional[str] = None, *, timeout: Optional[float] = 30.0,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 channel: Optional[grpc.Channel] = None,
                 options: Sequence[Tuple[str, Any]] = (),
                 metadata: Sequence[Tuple[str, str]] = (), retries: int = 3,
                 token: Optional[str] = None, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None):
        self.target = target or os.environ.get("AMPD_SERVER") or DEFAULT_TARGET
        self.timeout = timeout
        self.retries = max(1, retries)
        token = token if token is not None else os.environ.get("AMPD_TOKEN") or None
        tls_ca = tls_ca or os.environ.get("AMPD_TLS_CA") or None
        tls_cert = tls_cert or os.environ.get("AMPD_TLS_CERT") or None
        tls_key = tls_key or os.environ.get("AMPD_TLS_KEY") or None
        metadata = list(metadata)
        if token:
            metadata.append(("authorization", "Bearer " + token))
        if credentials is None and (tls_ca or tls_cert or tls_key):
            if bool(tls_cert) != bool(tls_key):
                raise ValueError("tls_cert and tls_key must be given together")

            def _read(path: Optional[str]) -> Optional[bytes]:
                if not path:
                    return None
                with open(path, "rb") as f:
                    return f.read()

            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca), private_key=_read(tls_key),
                certificate_chain=_read(tls_cert))
        self._metadata = tuple(metadata) or None
        self._own_channel = channel is None
        if channel is None:
            opts = _CHANNEL_OPTIONS + list(options)
            if credentials is None:
                channel = grpc.insecure_channel(self.target, options=opts)
            else:
                channel = grpc.secure_channel(self.target, credentials, options=opts)
        self.channel = channel
        self._training = training_service_pb2_grpc.TrainingServiceStub(channel)
        self._precision = precision_service_pb2_grpc.PrecisionServiceStub(channel)

    # -- plumbing ---------------------------------------------------------

    def close(self) -> None:
        if self._own_channel:
            self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Client(%r)" % self.target

    def _unary(self, stub_method, request, name: str, *, idempotent: bool = True):
        attempts = self.retries if idempotent else 1
        delay = 0.2
        for attempt in range(attempts):
            try:
                return stub_method(request, timeout=self.timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNAVAILABLE and attempt + 1 < attempts:
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise AmpdError.from_rpc_error(e, name) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def wait_ready(self, timeout: float = 10.0) -> "Client":
        """Blocks until the channel is connected; UnavailableError after timeout."""
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            from ._errors import UnavailableError
            raise UnavailableError(grpc.StatusCode.UNAVAILABLE,
                                   "no ampd at %s after %gs" % (self.target, timeout)) from None
        return self

    # -- jobs -------------------------------------------------------------

    def submit(self, spec: Any, request_id: Optional[str] = None) -> "Job":
        """Queues a job. spec: a dict in protobuf's JSON form (as examples/*.json),
        JSON text, the path of a JSON file, or a JobSpec. request_id makes the
        submission idempotent (a retry returns the first job); one is generated
        when not given, so the client's own retries never create two jobs."""
        request = training_service_pb2.CreateJobRequest(
            spec=job_spec(spec), request_id=request_id or "py-" + uuid.uuid4().hex)
        return Job(self, self._unary(self._training.CreateJob, request, "CreateJob"))

    def get(self, name: Any) -> "Job":
        """The job "jobs/{id}" (or just the id)."""
        request = training_service_pb2.GetJobRequest(name=_job_name(name))
        return Job(self, self._unary(self._training.GetJob, request, "GetJob"))

    def list(self, state: Union[None, str, int, Iterable[Union[str, int]]] = None, *,
             page_size: int = 100) -> Iterator["Job"]:
        """Every job, newest first, across all pages; state filters by one state
        or several ("RUNNING", ["QUEUED", "RUNNING"])."""
        if state is None:
            states: List[int] = []
        elif isinstance(state, (str, int)):
            states = [_state_value(state)]
        else:
            states = [_state_value(s) for s in state]
        token = ""
        while True:
            request = training_service_pb2.ListJobsRequest(states=states, page_size=page_size,
                                                           page_token=token)
            page = self._unary(self._training.ListJobs, request, "ListJobs")
            for job in page.jobs:
                yield Job(self, job)
            token = page.next_page_token
            if not token:
                return

    def cancel(self, name: Any) -> "Job":
        request = training_service_pb2.CancelJobRequest(name=_job_name(name))
        return Job(self, self._unary(self._training.CancelJob, request, "CancelJob",
                                     idempotent=False))

    def delete(self, name: Any) -> None:
        request = training_service_pb2.DeleteJobRequest(name=_job_name(name))
        self._unary(self._training.DeleteJob, request, "DeleteJob", idempotent=False)

    def metrics(self, name: Any, since_step: int = 0, **kwargs: Any) -> MetricsStream:
        """Job.metrics() for a job by name."""
        return MetricsStream(self, _job_name(name), since_step, **kwargs)

    # -- precision --------------------------------------------------------

    def capabilities(self) -> precision_service_pb2.Capabilities:
        """The server's devices and the precision modes each accepts."""
        return self._unary(self._precision.GetCapabilities,
                           precision_service_pb2.GetCapabilitiesRequest(), "GetCapabilities")

    def precision_modes(self, device: str = "cpu") -> List[str]:
        """The built-in modes jobs on `device` ("cpu" / "cuda") accept; [] if absent."""
        kind = job_spec_pb2.Device.Value("DEVICE_" + device.upper())
        for d in self.capabilities().devices:
            if d.kind == kind:
                return list(d.precision_modes)
        return []

    def explain(self, spec_or_model: Any, precision: Any = None, *,
                batch_size: Optional[int] = None,
                data: Any = None) -> List[precision_service_pb2.PrecisionExplanation]:
        """The per-op dtype plan and memory estimate, one PrecisionExplanation per
        mode. spec_or_model: a job spec (dict, JSON, path or JobSpec: its model,
        data, optimizer and batch size are used) or a model spec ({"mlp": {...}},
        which then needs inputDim and numClasses, or `data`). precision: a mode
        or profile name, a custom config (see precision.spec); None: the job
        spec's precision if it sets one, otherwise every built-in mode."""
        request = precision_service_pb2.ExplainPrecisionRequest()
        if is_model_spec(spec_or_model):
            request.model.CopyFrom(model_spec(spec_or_model))
        else:
            spec = job_spec(spec_or_model)
            request.model.CopyFrom(spec.model)
            request.data.CopyFrom(spec.data)
            request.optimizer.CopyFrom(spec.optimizer)
            if spec.training.HasField("batch_size"):
                request.batch_size = spec.training.batch_size
            if precision is None and spec.HasField("precision"):
                request.precision.CopyFrom(spec.precision)
        if data is not None:
            from ._specs import parse_message
            request.data.CopyFrom(parse_message(data, job_spec_pb2.DataSpec, "data spec"))
        if precision is not None:
            request.precision.CopyFrom(_precision.spec(precision))
        if batch_size is not None:
            request.batch_size = batch_size
        response = self._unary(self._precision.ExplainPrecision, request, "ExplainPrecision")
        return list(response.explanations)

    def profiles(self) -> List[precision_service_pb2.PrecisionProfile]:
        """Built-in profiles first, then user profiles."""
        response = self._unary(self._precision.ListProfiles,
                               precision_service_pb2.ListProfilesRequest(), "ListProfiles")
        return list(response.profiles)

    def profile(self, profile_id: str) -> precision_service_pb2.PrecisionProfile:
        request = precision_service_pb2.GetProfileRequest(name=_profile_name(profile_id))
        return self._unary(self._precision.GetProfile, request, "GetProfile")

    def create_profile(self, profile_id: str, config: Any,
                       description: str = "") -> precision_service_pb2.PrecisionProfile:
        """A named precision profile jobs can use as {"precision": {"profile": id}}.
        config: a PrecisionConfig, its dict form, or a base mode name."""
        profile = precision_service_pb2.PrecisionProfile(config=_precision.config(config),
                                                         description=description)
        request = precision_service_pb2.CreateProfileRequest(profile_id=profile_id,
                                                             profile=profile)
        return self._unary(self._precision.CreateProfile, request, "CreateProfile",
                           idempotent=False)

    def delete_profile(self, profile_id: str) -> None:
        request = precision_service_pb2.DeleteProfileRequest(name=_profile_name(profile_id))
        self._unary(self._precision.DeleteProfile, request, "DeleteProfile", idempotent=False)


class Job:
    """A job on the server: a snapshot (`proto`, an ampd.v1.Job) plus the calls
    that act on it. refresh() re-reads the snapshot."""

    def __init__(self, client: Client, proto: training_service_pb2.Job):
        self.client = client
        self.proto = proto

    # -- the snapshot -----------------------------------------------------

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def id(self) -> str:
        return self.proto.id

    @property
    def state(self) -> str:
        """"QUEUED", "RUNNING", "RESTARTING", "CANCELLING", "SUCCEEDED", "FAILED" or "CANCELLED"."""
        return _JobState.Name(self.proto.state)

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"

    @property
    def spec(self) -> job_spec_pb2.JobSpec:
        return self.proto.spec

    @property
    def precision(self) -> str:
        """The resolved precision mode ("bf16-mixed", a profile name, ...)."""
        return self.proto.precision

    @property
    def progress(self) -> training_service_pb2.Progress:
        return self.proto.progress

    @property
    def step(self) -> int:
        return self.proto.progress.step

    @property
    def total_steps(self) -> int:
        return self.proto.progress.total_steps

    @property
    def failure_reason(self) -> str:
        return self.proto.failure_reason

    @property
    def latest_step(self) -> Optional[training_service_pb2.StepRecord]:
        return self.proto.latest_step if self.proto.HasField("latest_step") else None

    @property
    def latest_eval(self) -> Optional[training_service_pb2.EvalRecord]:
        return self.proto.latest_eval if self.proto.HasField("latest_eval") else None

    @property
    def is_language_model(self) -> bool:
        """A GPT job: its evals score tokens (val loss, bits per byte)."""
        return self.proto.spec.model.HasField("gpt")

    @property
    def accuracy(self) -> Optional[float]:
        """The latest evaluation's accuracy; None before the first one, and
        for a language model, whose evals have no accuracy (see val_loss)."""
        e = self.latest_eval
        return e.accuracy if e is not None and not self.is_language_model else None

    @property
    def val_loss(self) -> Optional[float]:
        """The latest evaluation's loss (nats per token for a language model,
        per example for a classifier), or None before the first one."""
        e = self.latest_eval
        return e.loss if e is not None else None

    @property
    def bits_per_byte(self) -> Optional[float]:
        """A byte-level language model's latest val loss in bits per byte,
        else None."""
        e = self.latest_eval
        return e.bits_per_byte if e is not None and e.bits_per_byte > 0 else None

    @property
    def optimizer_state_bytes(self) -> int:
        """The bytes the job's optimizer states take (8-bit states at their
        true size); 0 before the job starts."""
        return self.proto.optimizer_state_bytes

    @property
    def loss(self) -> Optional[float]:
        s = self.latest_step
        return s.loss if s is not None else None

    def to_dict(self):
        return _precision.to_dict(self.proto)

    def __repr__(self) -> str:
        extra = ""
        if self.total_steps:
            extra += " step %d/%d" % (self.step, self.total_steps)
        if self.accuracy is not None:
            extra += " accuracy %.4f" % self.accuracy
        elif self.is_language_model and self.val_loss is not None:
            extra += " val_loss %.4f" % self.val_loss
        return "<Job %s %s%s %s>" % (self.id, self.state, extra, self.precision)

    # -- calls ------------------------------------------------------------

    def refresh(self) -> "Job":
        self.proto = self.client.get(self.name).proto
        return self

    def cancel(self) -> "Job":
        """Asks the server to cancel (queued jobs at once, running ones within a
        step); returns this job, refreshed. wait() for the final state."""
        self.proto = self.client.cancel(self.name).proto
        return self

    def delete(self) -> None:
        """Deletes an ended job (FailedPreconditionError while it runs)."""
        self.client.delete(self.name)

    def metrics(self, since_step: int = 0, *, heartbeats: bool = False, reconnect: bool = True,
                reconnect_timeout: float = 60.0) -> MetricsStream:
        """Iterates the job's events (Event objects) from the start, or those
        after since_step, until its terminal state; the stream resumes by itself
        after a lost connection, with no gap and no duplicate."""
        return MetricsStream(self.client, self.name, since_step, heartbeats=heartbeats,
                             reconnect=reconnect, reconnect_timeout=reconnect_timeout)

    def generate(self, prompt: Union[str, Sequence[int]], *, max_new_tokens: int = 256,
                 temperature: Optional[float] = None, top_k: int = 0,
                 top_p: Optional[float] = None, seed: Optional[int] = None,
                 artifact: str = "") -> Generation:
        """Samples from this job's weights (its final weights, else its newest
        checkpoint, or `artifact`): an iterator of text pieces for a
        byte-level model (prompt a str), of token ids otherwise (prompt a list
        of ids). temperature 0 is greedy; the same seed gives the same text."""
        return Generation(self.client,
                          generate_request(self.name, prompt, max_new_tokens=max_new_tokens,
                                           temperature=temperature, top_k=top_k, top_p=top_p,
                                           seed=seed, artifact=artifact))

    def wait(self, timeout: Optional[float] = None, *, raise_on_failure: bool = False) -> "Job":
        """Blocks until the job ends and returns it, refreshed (check .succeeded,
        .state, .failure_reason). TimeoutError after `timeout` seconds;
        raise_on_failure=True raises JobFailedError unless it SUCCEEDED."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.refresh()
        while not self.done:
            # The stream ends right after the terminal state; skip the history.
            stream = MetricsStream(self.client, self.name, since_step=self.step,
                                   deadline=deadline)
            try:
                for _ in stream:
                    pass
            finally:
                stream.close()
            self.refresh()
            if not self.done:  # pragma: no cover - a stream that ended early
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError("timed out waiting for %s" % self.name)
                time.sleep(0.1)
        if raise_on_failure and not self.succeeded:
            raise JobFailedError(self)
        return self
