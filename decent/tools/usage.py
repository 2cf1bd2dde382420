"""What every command of the CLI shares: the error of a refused command line, and the
help of ``--trust-imports``."""

from __future__ import annotations

# a run directory's config may name code (imports:): it runs only when the user says so
TRUST_HELP = ("import the modules and .py files the run's config.yaml names (code: read "
              "them first in a run directory you did not write)")


class UsageError(Exception):
    """A command line argparse refused."""
