"""The store's C parses (_cparse.c): a record for dispatch, a pushed run of DLedger entries."""

def v4_info(
    buf: bytes | bytearray | memoryview, pos: int, limit: int, /
) -> tuple[int, int, str, int, int, int, int, int, dict[str, str]] | None: ...
def scan_run(
    buf: bytes | bytearray | memoryview,
    off: int,
    start: int,
    at: int,
    base: int,
    file_size: int,
    prev_index: int,
    prev_term: int,
    /,
) -> tuple[int, int, int, int, bytes]: ...
