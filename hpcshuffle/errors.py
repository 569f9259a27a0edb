"""Errors that mean "the user asked for something impossible": printed as one line, no traceback."""


class ConfigError(ValueError):
    """Bad input: a value out of range, a missing path, ranks that disagree.

    Attributes:
        collective: every rank raised the same error at the same point, so only rank 0 prints it.
    """

    def __init__(self, message: str, *, collective: bool = False) -> None:
        super().__init__(message)
        self.collective = collective
