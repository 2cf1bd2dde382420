"""What a researcher types: the command line, sweeps and reports."""
