"""Device twins end to end: the Kubernetes API, the hub's twins extension, real agents and
mappers on the local device API (and simulated agents for the hub's own rules)."""
