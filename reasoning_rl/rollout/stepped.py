"""An engine that only generates (plugin engines, scripted test engines, a view over several colocated ranks)
as a ``ContinuousEngine``, so the frontier, the tool loop and eval drive every engine the same way.

``Stepped.submit`` queues requests; ``advance`` generates every queued request in one ``generate`` call per
request shape (the sampling request less its seed and place), each request with its own seed (``prompt_seeds``),
and returns each as one finished ``Delta`` stamped with the engine's version. Nothing is resident between steps, so
an update never meets a request in flight."""

from __future__ import annotations

from reasoning_rl.rollout.base import ContinuousEngine, Delta, Request, RolloutEngine, SamplingConfig


class Stepped:
    """``engine`` driven through submit / advance (see the module docstring)."""

    def __init__(self, engine: RolloutEngine) -> None:
        self.engine = engine
        self.queued: dict[str, Request] = {}
        self.sampled = 0  # tokens generated so far (``ContinuousEngine.sampled``): each in its one advance

    @property
    def version(self) -> int:
        return self.engine.version

    def submit(self, requests: list[Request]) -> None:
        for r in requests:
            self.queued[r.id] = r

    def abort(self, ids: list[str]) -> None:
        for rid in ids:
            self.queued.pop(rid, None)

    def running(self) -> int:
        return len(self.queued)

    def partial(self, ids: list[str]) -> list[Delta]:
        """Nothing: a request generates whole inside one ``advance``."""
        return []

    def advance(self) -> list[Delta]:
        """Every queued request, generated to its end (one call per shape, in submission order)."""
        shapes: dict[tuple[str, bool], tuple[SamplingConfig, list[Request]]] = {}
        for r in self.queued.values():
            drop = {"n": 1, "seed": None, "prompt_seeds": None}
            if r.seed is not None:  # its own seed: where it sits in a batch no longer matters
                drop["prompt_offset"] = 0
            shape = r.sampling.model_copy(update=drop)
            key = (shape.model_dump_json(), r.seed is None)
            shapes.setdefault(key, (shape, []))[1].append(r)
        self.queued = {}
        version = self.engine.version
        out = []
        for (_, unseeded), (shape, requests) in shapes.items():
            seeds = None if unseeded else tuple(r.seed for r in requests if r.seed is not None)
            sampling = shape.model_copy(update={"prompt_seeds": seeds})
            completions = self.engine.generate([r.prompt_ids for r in requests], sampling)
            for r, c in zip(requests, completions, strict=True):
                out.append(
                    Delta(
                        r.id,
                        list(c.token_ids),
                        list(c.logprobs),
                        c.text,
                        True,
                        c.finish_reason,
                        drafts=c.drafts,
                        version=version,
                    )
                )
                self.sampled += len(c.token_ids)
        return out


def as_continuous(engine: RolloutEngine | ContinuousEngine) -> ContinuousEngine:
    """``engine`` itself when it is continuous, else the same engine ``Stepped``."""
    if isinstance(engine, ContinuousEngine):
        return engine
    return Stepped(engine)
