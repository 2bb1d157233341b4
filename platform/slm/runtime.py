"""Reaching Ray: connect to a cluster when one is named, else start an embedded local Ray.

The same job spec runs unchanged on a laptop and on a cluster: under ``ray job submit`` the driver
inherits ``RAY_ADDRESS`` and connects; run by hand with no address, it starts a local Ray with every
CPU and the dashboard on 127.0.0.1.
"""

from __future__ import annotations

import os

from slm.config import RayConfig


def init_ray(cfg: RayConfig):
    """Initialise Ray once per process according to ``cfg``; return the Ray context."""
    import ray

    if ray.is_initialized():
        return ray.get_runtime_context()
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        context = ray.init(address=address, log_to_driver=True)
        where = f"connected to Ray at {address}"
    else:
        # address="local" always starts a fresh Ray, never a stale one recorded in a temp dir.
        context = ray.init(
            address="local",
            num_cpus=cfg.num_cpus,
            include_dashboard=cfg.include_dashboard,
            dashboard_host=cfg.dashboard_host,
            dashboard_port=cfg.dashboard_port,
        )
        where = "started an embedded local Ray"
    url = getattr(context, "dashboard_url", None)
    print(f"[ray] {where}; {ray.cluster_resources().get('CPU', 0):.0f} CPUs"
          + (f"; dashboard http://{url}" if url else ""), flush=True)
    return context


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
