"""Request processors, one module per request family; each exposes `processors(broker)`."""

from __future__ import annotations

from daemon.remoting.codes import ResponseCode
from daemon.remoting.errors import RemotingCommandError
from store.native import extend

extend(__name__, __path__)  # the compiled build of the hot modules, when it is fresh (store/native.py)

#: Java appends this (`FAQUrl.suggestTodo`) to several remarks; clients show remarks verbatim.
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def fail(code: int, remark: str) -> RemotingCommandError:
    """The exception a processor raises to answer with `code` and `remark`."""
    return RemotingCommandError(code, remark)


def system_error(remark: str) -> RemotingCommandError:
    return RemotingCommandError(ResponseCode.SYSTEM_ERROR, remark)
