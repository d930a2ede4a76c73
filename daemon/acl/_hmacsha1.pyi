"""The C HMAC-SHA1 of the compiled build (_hmacsha1.c)."""

def keyed(key: bytes, /) -> bytes: ...
def signature(states: bytes, values: str | tuple[str, ...], body: bytes, /) -> str: ...
def verify(
    states: bytes,
    fields: dict[str, str],
    keys: tuple[str, ...],
    excluded: tuple[str, ...],
    body: bytes,
    given: str,
    /,
) -> bool | None: ...
