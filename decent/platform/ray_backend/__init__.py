"""``backend: ray``: the driver side (:mod:`.backend`), the actors it starts
(:mod:`.client_actor` hosts a group of clients, :mod:`.coordinator` routes their
messages) and how payloads move between them (:mod:`.transport`)."""
