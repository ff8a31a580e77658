"""The teams story: two teams share a cluster's h100 units behind the fleet arbiter
(``python -m ray_ladder.demo --story teams``; ``bench/teams.py`` runs the same scenario)."""
