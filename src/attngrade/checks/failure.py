"""What a failed check raises: :class:`CheckFailure`, whose message ends once with
:data:`HIDDEN_TESTS_NOTE`, and :func:`expect`."""

from __future__ import annotations

from typing import Any

#: the last line of every failure message (once)
HIDDEN_TESTS_NOTE = "Hidden tests with other shapes and dtypes run when your notebook is graded."


class CheckFailure(AssertionError):
    """A test expectation that the student's answer does not meet (the message says why).

    ``str()`` of it ends with :data:`HIDDEN_TESTS_NOTE`; :attr:`message` is the message without it.
    """

    def __init__(self, message: str):
        message = str(message)
        if message.endswith(HIDDEN_TESTS_NOTE):
            message = message[: -len(HIDDEN_TESTS_NOTE)].rstrip()
        self.message = message
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.message}\n{HIDDEN_TESTS_NOTE}"


def expect(condition: Any, message: str) -> None:
    """Fail with ``message`` (a :class:`CheckFailure`) unless ``condition`` is true."""
    if not condition:
        raise CheckFailure(message)
