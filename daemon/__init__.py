"""Server processes of mqctl: the remoting layer, the NameServer and the broker.

Layering: `daemon` imports `store` and never `mqctl`.
"""
