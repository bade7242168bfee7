"""EdgeFleet edgeagent package."""
