"""The gRPC front of a broker for the official RocketMQ 5.x clients (`apache.rocketmq.v2`).

Optional: it needs the `grpc` extra (grpcio and the official Python client's wheel, whose generated
`rocketmq.grpc_protocol` modules carry the v2 messages and the servicer base class). Without it the
broker starts as before and says once that gRPC is off. docs/grpc.md has what works.
"""

from __future__ import annotations


def missing() -> str | None:
    """Why the front cannot run here (a module missing), or None."""
    try:
        import grpc  # noqa: F401
        from rocketmq.grpc_protocol import service_pb2_grpc  # noqa: F401
    except ImportError as exc:
        return f"{exc.name or exc} is not installed (pip install 'mqctl[grpc]')"
    return None
