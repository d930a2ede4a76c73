"""The admin client: RocketMQ 4.x admin requests to NameServers and brokers, ours or real ones."""
