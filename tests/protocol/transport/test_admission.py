"""The per-source bound on pending handshakes, on its own."""

from __future__ import annotations

import pytest

from protocol.transport.admission import PendingLimit


def test_a_source_gets_its_limit_and_its_slots_back() -> None:
    limit = PendingLimit(2)
    first = limit.admit(("10.0.0.1", 5000))
    second = limit.admit(("10.0.0.1", 5001))
    assert first is not None and second is not None
    assert limit.admit(("10.0.0.1", 5002)) is None  # a third at once: refused
    assert limit.admit(("10.0.0.2", 5000)) is not None  # another address is not affected
    assert limit.refused == 1
    first()
    first()  # released twice (upgrade done, then the end): counted once
    third = limit.admit(("10.0.0.1", 5003))
    assert third is not None
    assert limit.admit(("10.0.0.1", 5004)) is None
    second()
    third()
    assert len(limit) == 1  # 10.0.0.1 forgotten once nothing is pending; 10.0.0.2 holds one


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        PendingLimit(0)
