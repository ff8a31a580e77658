"""Keep a bench script's stdout for its JSON result alone."""

from __future__ import annotations

import os
import sys
from typing import TextIO


def json_stdout() -> TextIO:
    """Return a stream on the real stdout and send everything else written to fd 1 to
    stderr: Ray's driver prints raylet and worker notices to stdout, which would break
    ``python bench/x.py | jq``. Call it before starting Ray.

    Example:
        >>> out = json_stdout()  # doctest: +SKIP
        >>> print(json.dumps(result), file=out)  # doctest: +SKIP
    """
    sys.stdout.flush()
    stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return stream
