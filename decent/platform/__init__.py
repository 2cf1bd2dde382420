"""What a strategy never needs to know: config, runner, backends, messages and wire
sizes, network model, tracking, run directories and the command line."""
