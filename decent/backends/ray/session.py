"""The Ray a run uses: a cluster it joins by address, or an embedded one it starts (and
stops) itself, watched so that it dies with the driver."""

from __future__ import annotations

import logging
import os
import socket

import ray

from decent.backends.ray import embedded
from decent.core.errors import ConfigError
from decent.engine.config import RayConfig

# Embedded (laptop) Ray: keep its traffic on 127.0.0.1, send no usage statistics, and do
# not turn on token auth (which would also write ~/.ray/auth_token and so switch auth on
# for every later `ray start` on this machine). Never applied when joining a cluster.
LOCAL_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}


DIRECT_CALL_BYTES = 1 << 20


def connect(rc: RayConfig, store_mb: int | None = None, log_level: int = logging.INFO) -> bool:
    """Attach to Ray; True if this call started it (and so should shut it down).

    With no address and no ``RAY_ADDRESS`` (which ``ray job submit`` sets) an embedded
    single-machine Ray is started, without dashboard, with an object store of
    ``store_mb`` (default ``ray.object_store_mb``). ``log_level``: that of the driver's
    ``ray`` logger (WARNING: no "Started a local Ray instance" line)."""
    address = rc.address or os.environ.get("RAY_ADDRESS")
    if address:
        check_address(address, "ray.address" if rc.address else "RAY_ADDRESS")
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, logging_level=log_level)
        return True
    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    ray.init(
        # a Ray of its own, always: without "local", ray.init attaches to whatever
        # /tmp/ray/ray_current_cluster names (a user's own `ray start --head`, or the
        # stale file of a head that crashed) and then refuses num_cpus
        address="local",
        num_cpus=rc.num_cpus or os.cpu_count(),
        include_dashboard=False,
        logging_level=log_level,
        object_store_memory=(store_mb or rc.object_store_mb) * 2**20,
        # arguments and results up to 1 MiB go inline with the call instead of through the
        # object store: an inbox bundle of a few hundred KB is then ~3 ms faster per call
        # (measured on 2 cores). Payloads of 64 KiB or more are object refs regardless.
        _system_config={"max_direct_call_object_size": DIRECT_CALL_BYTES},
    )
    embedded.watch()  # this driver's Ray dies with it, even on SIGKILL
    return True


def shutdown() -> None:
    """Stop the Ray :func:`connect` started (and its watchdog: a joined cluster has none)."""
    try:
        ray.shutdown()
    finally:
        embedded.stop()


def check_address(address: str, field: str) -> None:
    """One line if nothing answers at a cluster's ``address`` (``ray.init`` would retry a
    dead address for minutes); ``auto`` is Ray's to resolve."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not port.isdigit():
        raise ConfigError(field, f"{address!r} is not HOST:PORT (e.g. 10.0.0.5:6379, or "
                          "ray://10.0.0.5:10001): give the head's address")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError(field, f"nothing answers at {hostport} ({exc.strerror or exc}): "
                          "start the cluster's head (`ray start --head`) or correct "
                          f"{field}") from None


