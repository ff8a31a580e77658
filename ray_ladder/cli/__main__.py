"""``python -m ray_ladder.cli``: the same as the ``ray-ladder`` command."""

from ray_ladder.cli import main

main()
