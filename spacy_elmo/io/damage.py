"""The one boundary between a model file's container (a zip archive, an HDF5 file) and what reads it: a file
cut short or damaged makes zipfile, zlib and h5py raise OSError, RuntimeError, KeyError, ValueError,
EOFError ... from deep inside, at open, at iteration or at a dataset's read. `damaged_as` turns each into a
`ModelFileError` naming the file (and the member or dataset) in one line, so a bad download is a refusal that
says which file, never a library's traceback, whatever the format or container.
"""

import contextlib
import struct
import zipfile
import zlib
from collections.abc import Iterator

from ..errors import ModelFileError, first_line

# What the readers raise on bytes that are not what their structures say: zipfile (BadZipFile, an OSError
# for an offset before the start, EOFError), zlib and lzma, h5py (OSError at open and read, RuntimeError
# from iteration, KeyError from opening an object, ValueError and UnicodeDecodeError from a damaged name or
# message, TypeError for a datatype it cannot represent).
DAMAGE_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    RuntimeError,
    KeyError,
    ValueError,
    TypeError,
    EOFError,
    IndexError,
    struct.error,
    zlib.error,
    zipfile.BadZipFile,
)
try:
    import lzma

    DAMAGE_ERRORS += (lzma.LZMAError,)
except ImportError:  # a Python built without lzma: zipfile then refuses lzma members at open
    pass

# Not damage: a refusal already naming the file, and a file that is not there (a reader asks for one that
# may be absent, and tells the user which one is missing).
PASSED_ON: tuple[type[Exception], ...] = (ModelFileError, FileNotFoundError)


@contextlib.contextmanager
def damaged_as(error: type[ModelFileError], name: str, what: str, remedy: str = "") -> Iterator[None]:
    """Raise `error("{name}: {what} ({detail}){remedy}")` from whatever the block's reading of a container
    raises on damaged bytes; a `ModelFileError` or FileNotFoundError raised in the block passes unchanged."""
    try:
        yield
    except PASSED_ON:
        raise
    except DAMAGE_ERRORS as err:
        raise error(f"{name}: {what} ({first_line(err)}){remedy}") from err
