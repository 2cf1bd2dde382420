"""Clients that lie and what defends against them: attacks on outgoing payloads."""
