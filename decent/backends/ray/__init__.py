"""``backend: ray``: the driver side (:mod:`.backend`), the actors it starts
(:mod:`.client_actor` hosts a group of clients; the driver routes their
messages) and how payloads move between them (:mod:`.transport`)."""
