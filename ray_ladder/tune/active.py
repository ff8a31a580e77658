"""Which ladder schedulers are set up for a Tune run in this process."""

from __future__ import annotations

import weakref
from typing import Any

#: The LadderSchedulers of this process's running Tune runs (weak: a finished run's goes).
ACTIVE: weakref.WeakSet[Any] = weakref.WeakSet()


def active() -> bool:
    """True while a LadderScheduler is set up for a Tune run in this process.

    Example:
        >>> active()
        False
    """
    return len(ACTIVE) > 0
