"""kiln.errors — every failure of the C library as a kiln.Error carrying the C
message and status; a subclass per status, each also deriving from the
built-in exception a Python caller would expect (ValueError, TypeError,
IndexError, OSError, NotImplementedError).
"""


class Error(Exception):
    """A kiln failure: .status is the C status name ("ERR_SHAPE", ...), .message the C message."""

    def __init__(self, message, status="ERR_INVALID"):
        super().__init__(message)
        self.message = message
        self.status = status


class InvalidArgumentError(Error, ValueError):
    """KILN_ERR_INVALID: an invalid argument or API misuse (also: a closed model)"""


class ShapeError(Error, ValueError):
    """KILN_ERR_SHAPE: shapes do not agree"""


class DtypeError(Error, TypeError):
    """KILN_ERR_DTYPE: a dtype not allowed here"""


class UnboundError(Error, ValueError):
    """KILN_ERR_UNBOUND: a size or input has no value at run time"""


class RangeError(Error, IndexError):
    """KILN_ERR_RANGE: an index out of range at run time (a token id, a position)"""


class KilnIOError(Error, OSError):
    """KILN_ERR_IO: a file or external tool failed"""


class FormatError(Error, ValueError):
    """KILN_ERR_FORMAT: a malformed file or data"""


class UnsupportedError(Error, NotImplementedError):
    """KILN_ERR_UNSUPPORTED: something kiln does not do (here)"""


class OutOfMemoryError(Error, MemoryError):
    """KILN_ERR_NOMEM"""


_BY_STATUS = [None, InvalidArgumentError, ShapeError, DtypeError, UnboundError, RangeError, OutOfMemoryError,
              KilnIOError, FormatError, UnsupportedError]
_NAMES = ["OK", "ERR_INVALID", "ERR_SHAPE", "ERR_DTYPE", "ERR_UNBOUND", "ERR_RANGE", "ERR_NOMEM", "ERR_IO",
          "ERR_FORMAT", "ERR_UNSUPPORTED"]


def from_status(status, message):
    """the exception for a kiln_status and its message"""
    cls = _BY_STATUS[status] if 0 < status < len(_BY_STATUS) else Error
    name = _NAMES[status] if 0 <= status < len(_NAMES) else str(status)
    return cls(message or name, name)
