"""Expected failures: each is one line for the user, never a traceback."""


class BackportError(Exception):
    """Something about the target stops the tool; the message says what to do."""
