"""Errors printed as one line, no traceback: bad input (the user asked for something impossible)
and a lost peer (the job can continue from its checkpoint once requeued)."""


class ConfigError(ValueError):
    """Bad input: a value out of range, a missing path, ranks that disagree.

    Attributes:
        collective: every rank raised the same error at the same point, so only rank 0 prints it.
    """

    def __init__(self, message: str, *, collective: bool = False) -> None:
        super().__init__(message)
        self.collective = collective


class PeerLost(RuntimeError):
    """A peer rank stopped answering: frozen, dead, or cut off. Nothing is wrong with the input,
    so the job ends with an exit code its script requeues on (checkpoint.PEER_LOST_EXIT_CODE).

    Attributes:
        reporter: whether this rank prints the error; of the ranks in the roll call (comm/peers.py)
            only the first to finish it does, instead of every survivor the same line.
    """

    FIX = "the job script requeues and resumes from the last checkpoint; or resubmit"

    def __init__(self, message: str, *, reporter: bool = True) -> None:
        super().__init__(f"{message}; {self.FIX}")
        self.reporter = reporter


def at_least(name: str, value: float, minimum: float = 1, note: str = "", *, error: type[ValueError] = ValueError) -> None:
    """Fail unless `value` >= `minimum` (NaN fails too), as `error`("<name> must be >= <minimum>
    [<note>], got <value>"); `note` gives the unit or what the bound means, e.g. "(0: off)"."""
    if not value >= minimum:
        raise error(f"{name} must be >= {minimum}{' ' + note if note else ''}, got {value}")


def positive(name: str, value: float, note: str = "", *, error: type[ValueError] = ValueError) -> None:
    """Fail unless `value` > 0 (NaN fails too), as `error`("<name> must be > 0 [<note>], got <value>")."""
    if not value > 0:
        raise error(f"{name} must be > 0{' ' + note if note else ''}, got {value}")
