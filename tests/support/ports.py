"""Free loopback ports for daemons started as subprocesses, which cannot be given port 0: from below the
kernel's ephemeral range (:mod:`mqctl.services.ports`, which ``mqctl up`` uses too)."""

from mqctl.services.ports import free_block, free_port

__all__ = ["free_block", "free_port"]
