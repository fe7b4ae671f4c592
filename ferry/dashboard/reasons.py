"""How the dashboard names a failed read on a page: one line, the exception's class and first line."""

from __future__ import annotations


def why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300]
