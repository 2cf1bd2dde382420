"""Clients that lie and what defends against them: attacks on outgoing payloads, the
omniscient attacks that read the honest ones, and the robust rules that combine them."""

# the omniscient attacks register themselves in ATTACKS when their module is imported:
# importing any part of this package registers them, wherever ATTACKS is read
from decent.robust import omniscient  # noqa: F401
