"""EdgeFleet protocol package."""
