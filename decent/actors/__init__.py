"""The Ray actors: ClientActor (hosts a group of clients) and Coordinator (routes
messages along edges and counts their bytes)."""
