"""`ray-ladder grafana`: print the Grafana dashboard or the Prometheus alerting rules."""

from __future__ import annotations

import json

import click

from ray_ladder.cli.dashboards import alert_rules, grafana_dashboard


@click.command()
@click.option("--rules", is_flag=True,
              help="Print the Prometheus alerting-rule file (YAML) instead.")
def grafana(rules: bool) -> None:
    """Print the ray-ladder Grafana dashboard (JSON; import it in Grafana).

    Its panels read the metrics Ray exports from every node (the ``ray_ladder_*``
    series); `--rules` prints the alerts: degraded longer than max_degraded_seconds, and
    ladder exhausted.
    """
    click.echo(alert_rules() if rules else json.dumps(grafana_dashboard(), indent=2))
