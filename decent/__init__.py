"""decent: a Ray-based experiment platform for decentralized training."""

__version__ = "0.1.0"
