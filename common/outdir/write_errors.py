"""The one-line errors of an output folder that cannot be written (a full disk, no permission), and room reserved
ahead for a memory-mapped file."""

import errno
import os
import shutil

from common.io import InputError


def write_error(folder, error, staged=None, left="nothing was written", need=None):
    """The one-line InputError for an OSError met writing into ``folder``; a full disk names what was needed
    (``need``, else the bytes the write had reached: ``staged``, the file or folder being written), what is free,
    and ``left``: what became of it."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        written = tree_bytes(staged) if staged else 0
        free = shutil.disk_usage(folder).free if os.path.isdir(folder) else 0
        need = need or (f"needs more than {written:,} bytes" if written else None)
        return InputError(f"{folder}: no space left on the device ({need + ', ' if need else ''}{free:,} "
                          f"{'free' if need else 'bytes free'}); {left}")
    return InputError(f"{folder}: cannot write: {error.strerror or error}")


# errors that mean the disk is full, as libraries spell them in their own exceptions
FULL_DISK = {os.strerror(code): code for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)}


def saving_error(folder, error, staged=None, left="nothing was written"):
    """``write_error`` for an error met while a library saved into ``folder`` (torch, safetensors, faiss): an
    OSError; another error whose message holds the system's words for a full disk (safetensors' SafetensorError,
    faiss's RuntimeError); or any error on a device left with (almost) no free space, which is how torch reports a
    full disk. None for any other error (a bug, to be raised as it is)."""
    if isinstance(error, OSError):
        return write_error(folder, error, staged, left)
    for words, code in FULL_DISK.items():
        if words in str(error):
            return write_error(folder, OSError(code, words), staged, left)
    try:
        nearly_full = shutil.disk_usage(folder).free < 64 << 20
    except OSError:
        nearly_full = False
    if nearly_full:
        return write_error(folder, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), staged, left)
    return None


def tree_bytes(path):
    """Bytes allocated to a file, or to every file under a folder (links not followed)."""
    if not os.path.lexists(path):
        return 0
    if not os.path.isdir(path) or os.path.islink(path):
        return os.lstat(path).st_size
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, files in os.walk(path) for f in files)


def reserve(path, nbytes, folder):
    """Allocate ``nbytes`` to the file ``path`` now (``posix_fallocate``), so that a memory-mapped write into it
    can never meet a full disk (which kills the process with SIGBUS); a full disk is one line naming ``folder``
    and the bytes needed. A file system that cannot allocate ahead is left as it is."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise write_error(folder, e, need=f"{os.path.basename(path)} needs {nbytes:,} bytes") from None
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    finally:
        os.close(fd)


# what only writing can fail with (reading an input cannot), so it is reported against the output folder
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
