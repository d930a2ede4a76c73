"""Running a service the way the daemons run, in the test's process."""

from __future__ import annotations

import asyncio
import gc

from daemon.lifecycle import Service, serve


async def serve_here(service: Service, timeout: float = 30.0) -> None:
    """``serve(service)`` until it returns or raises (within ``timeout``), then put back the collector
    settings it tunes for a daemon's life, which would otherwise stay for the rest of the test run."""
    threshold = gc.get_threshold()
    try:
        await asyncio.wait_for(serve(service), timeout)
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
