"""RocketMQ 4.9.8's remoting settings (NettyServerConfig, NettyClientConfig) with their defaults.

Data for `RocketMQKeys.ROCKETMQ_DEFAULTS`: both daemons register NettyServerConfig with their config
(GET_BROKER_CONFIG / GET_NAMESRV_CONFIG report it), the broker NettyClientConfig as well. Defaults that
Java derives from the processor count are derived from this host's the same way.
"""

from __future__ import annotations

import os

#: `Runtime.getRuntime().availableProcessors()`.
CPUS = os.cpu_count() or 1

NETTY_SERVER_KEYS: dict[str, str] = {
    "listenPort": "8888",
    "serverWorkerThreads": "8",
    "serverCallbackExecutorThreads": "0",
    "serverSelectorThreads": "3",
    "serverOnewaySemaphoreValue": "256",
    "serverAsyncSemaphoreValue": "64",
    "serverChannelMaxIdleTimeSeconds": "120",
    "serverSocketSndBufSize": "0",
    "serverSocketRcvBufSize": "0",
    "writeBufferHighWaterMark": "0",
    "writeBufferLowWaterMark": "0",
    "serverSocketBacklog": "1024",
    "serverPooledByteBufAllocatorEnable": "true",
    "useEpollNativeSelector": "false",
}

NETTY_CLIENT_KEYS: dict[str, str] = {
    "clientWorkerThreads": "4",
    "clientCallbackExecutorThreads": str(CPUS),
    "clientOnewaySemaphoreValue": "65535",
    "clientAsyncSemaphoreValue": "65535",
    "connectTimeoutMillis": "3000",
    "channelNotActiveInterval": "60000",
    "clientChannelMaxIdleTimeSeconds": "120",
    "clientSocketSndBufSize": "0",
    "clientSocketRcvBufSize": "0",
    "clientPooledByteBufAllocatorEnable": "false",
    "clientCloseSocketIfTimeout": "true",
    "useTLS": "false",
    "writeBufferHighWaterMark": "0",
    "writeBufferLowWaterMark": "0",
}
