"""Ray adapters every integration shares: node states, the capacity view, the autoscaler
hook's roles, the error vocabulary of a lost rung, the event log and the one door to Ray's
private APIs."""
