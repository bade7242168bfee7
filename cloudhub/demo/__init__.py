"""``cloudhub demo``: a whole edge fleet on one machine (see :mod:`cloudhub.demo.run`)."""

from cloudhub.demo.errors import DemoError
from cloudhub.demo.relay import Relay
from cloudhub.demo.run import Check, Demo, DemoOptions, DemoState

__all__ = ["Check", "Demo", "DemoError", "DemoOptions", "DemoState", "Relay"]
