"""EdgeFleet cloudhub package."""
