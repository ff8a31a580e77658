"""The ``ray-ladder`` command line (the only part of ray-ladder that prints)."""

from __future__ import annotations

import importlib
import importlib.util

import click

from ray_ladder._lazy import MissingExtraError

# name -> "module:attribute"; commands load on use so `ray-ladder validate` starts fast
# and never imports Ray.
_COMMANDS = {
    "validate": "ray_ladder.cli.spec_cmds:validate",
    "show": "ray_ladder.cli.spec_cmds:show",
    "schema": "ray_ladder.cli.spec_cmds:schema",
    "simulate": "ray_ladder.cli.simulate_cmd:simulate",
    "simulate-teams": "ray_ladder.cli.teams_cmd:simulate_teams_cmd",
    "node-resources": "ray_ladder.cli.node_cmd:node_resources",
    "render": "ray_ladder.cli.render_cmd:render",
    "autoscale": "ray_ladder.cli.autoscale_cmd:autoscale",
    "status": "ray_ladder.cli.status_cmd:status",
    "events": "ray_ladder.cli.events_cmd:events",
    "timeline": "ray_ladder.cli.timeline_cmd:timeline",
    "grafana": "ray_ladder.cli.grafana_cmd:grafana",
    "fleet": "ray_ladder.cli.fleet_cmd:fleet",
    "submit": "ray_ladder.cli.submit_cmd:submit",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(
            name for name, target in _COMMANDS.items()
            if importlib.util.find_spec(target.split(":")[0]) is not None
        )

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError:
            return None

    def invoke(self, ctx: click.Context) -> object:
        # A missing optional dependency is one line naming its extra, exit 1, no traceback.
        try:
            return super().invoke(ctx)
        except MissingExtraError as err:
            raise click.ClickException(str(err)) from None


@click.group(cls=_LazyGroup)
@click.version_option(package_name="ray-ladder")
def main() -> None:
    """Compute fallback ladders for Ray."""
