"""One error type for everything the user must fix; the CLI prints its message as one line."""


class KgenError(Exception):
    """A problem the user can act on. The message names the cause and what to do next."""


class Unsupported(KgenError):
    """The traced model has an op (or op argument) outside every family's scope."""
