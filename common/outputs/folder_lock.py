"""The lock an output folder is held with for as long as one run writes it."""

import fcntl
import os

from common.io import InputError


LOCK = ".lock"  # held (fcntl.flock) by the run writing a folder; removed when it ends


class FolderLock:
    """An advisory lock on an output folder for as long as one run writes it, so that a second run on the same
    folder is refused instead of interleaving its files with the first's. The lock file holds the owner's process
    id, for the error message, and is removed on release (a file left by a killed run is simply taken over)."""

    def __init__(self, directory, name=LOCK):
        self.directory, self.path, self.fd = directory, os.path.join(directory, name), None

    def acquire(self):
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise InputError(f"{self.path}: cannot be opened as a lock file: {e.strerror}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                owner = os.read(fd, 32).decode("ascii", "replace").strip()
                os.close(fd)
                raise InputError(f"{self.directory}: in use by another run (process {owner or 'unknown'}); wait "
                                 "for it to end or give another folder") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.lstat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the previous owner removed the file between our open and our lock: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self):
        if self.fd is None:
            return
        try:
            os.remove(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
        return False
