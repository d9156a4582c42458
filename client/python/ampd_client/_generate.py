"""Generation: text sampled from a GPT job's weights, as an iterator."""
from __future__ import annotations

from typing import Any, Iterator, List, Optional, Sequence, Union

import grpc

from ._errors import AmpdError
from ._proto import training_service_pb2


class Generation:
    """Iterates what a Generate call streams: text pieces (str) for a
    byte-level model, token ids (int) otherwise, as the server chooses them.

        for piece in job.generate("The ", max_new_tokens=100, seed=1):
            print(piece, end="", flush=True)

    After (or during) the iteration: .seed (the seed used, random when none
    was given), .artifact (the weights sampled from), .text and .tokens (all so
    far), .tokens_per_second (at the end). close() (or leaving a `with`
    block) cancels the call; the server stops at once. Errors (bad arguments,
    a job with no weights yet) raise AmpdError subclasses from the iteration.
    """

    def __init__(self, client: Any, request: training_service_pb2.GenerateRequest):
        self._call = client._training.Generate(request, metadata=client._metadata)
        self._name = request.name
        self.seed: Optional[int] = None
        self.artifact: Optional[str] = None
        self.byte_level: Optional[bool] = None
        self.text = ""
        self.tokens: List[int] = []
        self.tokens_per_second: Optional[float] = None
        self.done = False

    def __iter__(self) -> Iterator[Union[str, int]]:
        try:
            for r in self._call:
                if r.artifact:
                    self.seed, self.artifact, self.byte_level = r.seed, r.artifact, r.byte_level
                self.tokens.extend(r.tokens)
                if self.byte_level:
                    self.text += r.text
                    if r.text:
                        yield r.text
                else:
                    yield from r.tokens
                if r.done:
                    self.done = True
                    self.tokens_per_second = r.tokens_per_second
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and not self.done:
                return  # close() was called
            raise AmpdError.from_rpc_error(e, "Generate " + self._name) from None

    def close(self) -> None:
        """Cancels the call (the server stops generating)."""
        self._call.cancel()

    def __enter__(self) -> "Generation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def generate_request(name: str, prompt: Union[str, Sequence[int]], *, max_new_tokens: int,
                     temperature: Optional[float], top_k: int, top_p: Optional[float],
                     seed: Optional[int], artifact: str) -> training_service_pb2.GenerateRequest:
    req = training_service_pb2.GenerateRequest(name=name, max_new_tokens=max_new_tokens,
                                               top_k=top_k, artifact=artifact)
    if isinstance(prompt, str):
        req.prompt = prompt
    else:
        req.prompt_tokens.extend(int(t) for t in prompt)
    if temperature is not None:
        req.temperature = temperature
    if top_p is not None:
        req.top_p = top_p
    if seed is not None:
        req.seed = seed
    return req
