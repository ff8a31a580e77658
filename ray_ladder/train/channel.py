"""The run's channel between the ladder (in Ray Train's controller) and its workers: Ray's KV."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ray_ladder.cluster import ray_private

#: KV namespace of every ladder Train run (keys ``train/<run id>/<what>``).
NAMESPACE = "ray_ladder"


@dataclass(frozen=True)
class ClimbRequest:
    """The ladder asks the workers to stop at their next checkpoint so it can move them:
    up (a climb), or off a node Ray is draining (a preemption notice).

    Attributes:
        id: Request number (unique within the run).
        to: The rung the run will move to (for a notice: the best that fitted without the
            drained nodes when it came, ``""`` if none did; the restart decides again).
        cancelled: The better rung went away before the move: keep training.
        notice: The request is for a preemption notice: the group restarts elsewhere as
            soon as every worker stopped at a committed checkpoint (never cancelled).
    """

    id: int
    to: str
    cancelled: bool = False
    notice: bool = False


class Channel:
    """Messages of one run, each a small JSON value in Ray's internal KV.

    The controller writes a :class:`ClimbRequest`; rank 0 reads it at a checkpoint
    (``ray_ladder.train.report``), waits until Ray Train committed that checkpoint and
    answers :meth:`park`; the controller then restarts the group on the better shape (a
    climb) or ends Ray Train's wait for the drain's deadline (a notice).
    The controller also keeps the run's :class:`LadderSummary` here for the driver.

    Args:
        run_id: The ladder run's id (one per ``LadderTrainer.fit()``).

    Example:
        >>> channel = Channel("3f2a")  # doctest: +SKIP
        >>> channel.ask_climb(1, "h100x8"); channel.climb()  # doctest: +SKIP
        ClimbRequest(id=1, to='h100x8', cancelled=False, notice=False)
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def _key(self, what: str) -> str:
        return f"train/{self.run_id}/{what}"

    def _put(self, what: str, value: Any) -> None:
        ray_private.kv_put(self._key(what), json.dumps(value), namespace=NAMESPACE)

    def _get(self, what: str) -> Any:
        raw = ray_private.kv_get(self._key(what), namespace=NAMESPACE)
        return None if raw is None else json.loads(raw)

    def _del(self, what: str) -> None:
        ray_private.kv_del(self._key(what), namespace=NAMESPACE)

    # --- climb at a checkpoint -------------------------------------------------------------

    def ask_climb(self, request_id: int, to: str, *, notice: bool = False) -> None:
        """Controller: stop at the next checkpoint, the run moves to ``to`` (``notice``:
        off a drained node, replacing any standing climb)."""
        self._put("climb", {"id": request_id, "to": to, "cancelled": False, "notice": notice})

    def cancel_climb(self, request_id: int) -> None:
        """Controller: the better rung is gone again; workers waiting at a checkpoint go on."""
        current = self.climb()
        if current is not None and current.id == request_id:
            self._put("climb", {"id": request_id, "to": current.to, "cancelled": True,
                                "notice": current.notice})

    def climb(self) -> ClimbRequest | None:
        """The current move request (a climb or a notice), if any."""
        value = self._get("climb")
        return None if value is None else ClimbRequest(
            int(value["id"]), str(value["to"]), bool(value["cancelled"]),
            bool(value.get("notice", False)))

    def park(self, request_id: int) -> None:
        """Rank 0: every worker stopped at a checkpoint Ray Train has committed."""
        self._put("parked", request_id)

    def parked(self) -> int | None:
        """The request the workers stopped for, if any."""
        value = self._get("parked")
        return None if value is None else int(value)

    def clear(self) -> None:
        """Controller, before a new worker group: no request stands, nobody is parked."""
        self._del("climb")
        self._del("parked")

    # --- the driver's copy of the history --------------------------------------------------

    def put_summary(self, summary: dict[str, Any]) -> None:
        """Controller: the run's history so far (``LadderSummary.to_dict()``)."""
        self._put("summary", summary)

    def summary(self) -> dict[str, Any] | None:
        """Driver: the last history the controller wrote."""
        value = self._get("summary")
        return value if isinstance(value, dict) else None

    def delete(self) -> None:
        """Remove every key of the run (after the driver read its summary)."""
        for what in ("climb", "parked", "summary"):
            self._del(what)
