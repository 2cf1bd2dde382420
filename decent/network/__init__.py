"""The simulated network between clients: the router (edge enforcement, exact byte
accounting, deterministic inboxes) and the model that turns bytes into time."""
