"""ampd_client: a Python client for ampd, the mixed-precision training server.

    from ampd_client import Client
    with Client("localhost:50051") as client:
        job = client.submit("examples/fashion_mlp_bf16.json")
        for event in job.metrics():          # resumes by itself after a lost connection
            if event.kind == "eval":
                print(event.step, event.accuracy)
        print(job.wait().state)
        # A GPT job's text, as it is sampled:
        #   for piece in job.generate("The ", max_new_tokens=100): print(piece, end="")

The generated stubs and messages are in ampd_client.v1 (v1.JobSpec,
v1.TrainingServiceStub, ...); precision helpers in ampd_client.precision.
"""
from . import precision, v1
from ._client import DEFAULT_TARGET, TERMINAL_STATES, Client, Job
from ._errors import (AmpdError, FailedPreconditionError, FieldViolation, InvalidArgumentError,
                      JobFailedError, NotFoundError, ResourceExhaustedError, SpecError,
                      UnavailableError, Violation)
from ._events import KINDS, Event, MetricsStream
from ._generate import Generation
from ._specs import job_spec, model_spec

__version__ = "0.1.0"

__all__ = [
    "AmpdError",
    "Client",
    "DEFAULT_TARGET",
    "Event",
    "FailedPreconditionError",
    "FieldViolation",
    "Generation",
    "InvalidArgumentError",
    "Job",
    "JobFailedError",
    "KINDS",
    "MetricsStream",
    "NotFoundError",
    "ResourceExhaustedError",
    "SpecError",
    "TERMINAL_STATES",
    "UnavailableError",
    "Violation",
    "job_spec",
    "model_spec",
    "precision",
    "v1",
]
