from collections.abc import Callable
from typing import Any

def maker(cls: type, names: tuple[str, ...], /) -> Callable[..., Any]: ...
