"""The deployment class of a compute rung: wraps the user's rung class."""

from __future__ import annotations

import inspect
from typing import Any

from ray_ladder.core.context import RungContext
from ray_ladder.serve.llm.protocol import is_llm_class
from ray_ladder.serve.llm.replica import LLMRungReplica


class PayloadError(ValueError):
    """A payload that does not match the rung class's ``input_model`` (HTTP 400)."""


def validated(model: Any, payload: Any) -> Any:
    """``payload`` parsed by the rung class's ``input_model`` (a pydantic model), or as is.

    Raises:
        PayloadError: the payload does not match, naming the first field and the fix.
    """
    if model is None:
        return payload
    from pydantic import ValidationError

    try:
        return model.model_validate(payload)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "<body>"
        raise PayloadError(f"{where}: {first.get('msg')} (the rung takes "
                           f"{model.__name__})") from None


class RungReplica:
    """Serve replica of one compute rung (sync user ``__call__``).

    Builds ``user_cls(rung, **init_kwargs)`` once and answers ``__call__(payload)`` with
    it. A class that declares ``input_model`` (a pydantic model) gets the payload parsed
    by it, and a payload that does not match is a 400 (:class:`PayloadError`), never the
    model's own exception. ``ladder_ping`` lets the router start a cold replica without
    running the model.

    Example:
        >>> RungReplica(EchoModel, RungContext(name="cpu", index=0, ladder="x"), {})
        ... # doctest: +SKIP
    """

    def __init__(self, user_cls: type, rung: RungContext, init_kwargs: dict[str, Any]):
        self.rung = rung
        self.model = user_cls(rung, **init_kwargs)
        self.input_model = getattr(user_cls, "input_model", None)

    def __call__(self, payload: Any) -> Any:
        return self.model(validated(self.input_model, payload))

    def ladder_ping(self) -> str:
        """Answer at once (the router primes cold rungs with it)."""
        return self.rung.name


class AsyncRungReplica(RungReplica):
    """Serve replica of one compute rung whose user ``__call__`` is ``async``."""

    async def __call__(self, payload: Any) -> Any:  # type: ignore[override]
        return await self.model(validated(self.input_model, payload))


def replica_class(user_cls: type) -> type:
    """The wrapper matching ``user_cls``: an LLM rung (``generate``), else its
    ``__call__`` (sync or async)."""
    if not isinstance(user_cls, type):
        raise TypeError(f"a rung needs a class, got {type(user_cls).__name__}")
    if is_llm_class(user_cls):
        if not inspect.isasyncgenfunction(user_cls.generate):  # type: ignore[attr-defined]
            raise TypeError(f"rung class {user_cls.__name__}: generate must be an async "
                            "generator (async def generate(self, request): ... yield piece)")
        return LLMRungReplica
    call = next((vars(k)["__call__"] for k in user_cls.__mro__ if "__call__" in vars(k)), None)
    if call is None:
        raise TypeError(f"rung class {user_cls.__name__} has no __call__(self, payload)")
    return AsyncRungReplica if inspect.iscoroutinefunction(call) else RungReplica
