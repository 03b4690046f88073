"""The lock an output folder is held with for as long as one run writes it."""

import errno
import fcntl
import os
import socket

from common.io import InputError


LOCK = ".lock"  # held (fcntl.flock, or made exclusively where flock is missing) by the run writing a folder
# what flock raises where another process holds the lock; any other error (ENOSYS, ENOLCK, EOPNOTSUPP: Lustre mounted
# without -o flock, NFS mounted nolock) says that the filesystem has no flock
HELD = (errno.EWOULDBLOCK, errno.EAGAIN)


def start_time(pid):
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat's field 22), or "-" where /proc does not
    say: with the process id it tells the process apart from a later one given the same id."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "-"


def owner_record():
    """What a lock file holds: the host, process id and start time of the process holding it."""
    return f"{socket.gethostname()} {os.getpid()} {start_time(os.getpid())}\n"


def read_owner(fd):
    """``(host, pid, start)`` of a lock file's record, or None where it holds none (its owner has not written it yet,
    or an earlier version's bare process id)."""
    parts = os.pread(fd, 512, 0).decode("utf-8", "replace").split()
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


def is_stale(owner):
    """Whether the process a lock file names is gone: judged only on the host it names (a process of another node is
    out of sight, so its lock is never taken over), by its id and start time."""
    if owner is None or owner[0] != socket.gethostname():
        return False
    host, pid, start = owner
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return start != "-" and start_time(pid) not in (start, "-")


class FolderLock:
    """An advisory lock on an output folder for as long as one run writes it, so that a second run on the same
    folder is refused instead of interleaving its files with the first's. The lock file names its owner's host and
    process for the error message, and is removed on release.

    Where the filesystem has flock, the lock is a flock on the file, which the kernel drops when its process dies: a
    file a killed run left is simply taken over. Where it has none (a cluster's Lustre or NFS mount), the file's
    exclusive creation (``O_EXCL``, atomic on both) is the lock; a file a killed run left is taken over only on the
    host it names, once that process is gone, and one of another host is refused until it is removed by hand."""

    def __init__(self, directory, name=LOCK):
        self.directory, self.path, self.fd = directory, os.path.join(directory, name), None

    def acquire(self):
        while True:
            fd, created = self._open()
            if fd is None:
                continue  # removed between our two opens: try again
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                owner = read_owner(fd)
                if e.errno in HELD:
                    os.close(fd)
                    raise self._in_use(owner, "") from None
                if created:
                    break  # no flock here: the exclusive creation is the lock
                if not is_stale(owner):
                    os.close(fd)
                    raise self._in_use(owner, f" (a filesystem without flock: if that run is gone, remove {self.path})")
                self._remove_stale(fd)
                os.close(fd)
                continue
            if self._is_current(fd):
                break
            os.close(fd)  # the previous owner removed the file between our open and our lock: lock the new one
        os.ftruncate(fd, 0)
        os.pwrite(fd, owner_record().encode(), 0)
        self.fd = fd
        return self

    def _open(self):
        """The lock file, made exclusively (``True``) or opened as another run left it (``False``); ``(None, None)``
        where it was removed meanwhile."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            pass
        except OSError as e:
            raise InputError(f"{self.path}: cannot be opened as a lock file: {e.strerror}") from None
        try:
            return os.open(self.path, flags), False
        except FileNotFoundError:
            return None, None
        except OSError as e:
            raise InputError(f"{self.path}: cannot be opened as a lock file: {e.strerror}") from None

    def _is_current(self, fd):
        """Whether ``fd`` is still the file at the lock's path."""
        try:
            return os.path.samestat(os.fstat(fd), os.lstat(self.path))
        except FileNotFoundError:
            return False

    def _remove_stale(self, fd):
        """Remove the stale lock file open as ``fd``, unless another run has taken it over meanwhile (the file at
        the path is no longer that one, or holds another record)."""
        if self._is_current(fd):
            try:
                with open(self.path, "rb") as now:
                    same = now.read(512) == os.pread(fd, 512, 0)
                if same:
                    os.remove(self.path)
            except FileNotFoundError:
                pass

    def _in_use(self, owner, note):
        who = f"process {owner[1]} on {owner[0]}" if owner else "process unknown"
        return InputError(f"{self.directory}: in use by another run ({who}); wait for it to end or give another "
                          f"folder{note}")

    def release(self):
        if self.fd is None:
            return
        try:
            if self._is_current(self.fd):
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
