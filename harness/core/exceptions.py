"""The errors normbench raises for problems a user can fix.

Every message says what was wrong, the value received, and the fix; the CLI
and the pytest plugin print it as one line, never a traceback.
"""


class NormbenchError(Exception):
    """A problem the user can fix; its message says what was wrong and the fix."""


class UnknownBackend(NormbenchError):
    """No installed plugin provides that backend name."""


class BackendUnavailable(NormbenchError):
    """The backend is installed but cannot run here (the message says why)."""


class PluginError(NormbenchError):
    """A plugin is broken: import error, not a Backend, bad name, raising availability()."""


class InvalidInput(NormbenchError, ValueError):
    """Arguments that do not describe a LayerNorm: shapes that do not match, a bad eps."""
