"""The C parse of an all-IPv4 CommitLog record for dispatch (_recordinfo.c)."""

def v4_info(
    buf: bytes | bytearray | memoryview, pos: int, limit: int, /
) -> tuple[int, int, str, int, int, int, int, int, dict[str, str]] | None: ...
