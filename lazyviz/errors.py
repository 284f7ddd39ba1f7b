"""The one base for errors a user can cause or must know about: each carries one line
for the user, and `lazyviz` catches it once, prints that line and exits with its status."""
from __future__ import annotations


class LazyvizError(Exception):
    exit_status = 2

    def __init__(self, message: str, exit_status: int | None = None) -> None:
        super().__init__(message)
        if exit_status is not None:
            self.exit_status = exit_status
