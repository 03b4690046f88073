"""Files between the numbered scripts: JSONL/NPY reading with line-exact errors, atomic writes, manifests."""

import contextlib
import datetime
import errno
import fcntl
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize
import zlib
from importlib import metadata

import orjson


class Preempted(Exception):
    """Training stopped on SIGTERM after saving a checkpoint; the scripts exit with status 143 (128 + SIGTERM)."""


class InputError(Exception):
    """Bad input a user can fix; the scripts print it as one line and exit non-zero. A line break or other control
    character in the message (from a file name, a CSV header, a value quoted from the input) is shown escaped, as
    Python writes it in a string, so that the message stays one line."""

    def __init__(self, message):
        super().__init__(_CONTROL.sub(lambda m: repr(m.group())[1:-1], message))


# what str.splitlines() breaks a line at, and the other C0/C1 control characters
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


_SAFE_NAME = re.compile(r"\w[\w.-]{0,99}")


def safe_name(name, what):
    """``name``, checked to be usable as (part of) a file name in an output folder: letters, digits, '_', '-' and
    '.', not first, at most 100 characters, so that it can neither leave the folder nor name a hidden file. A name
    from data or the command line goes through here before it becomes a path; ``what`` says where it came from in
    the one-line error (e.g. ``"articles.jsonl:3: label level"``)."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise InputError(f"{what} {name!r} cannot be a file name: use at most 100 letters, digits, '_', '-' and "
                         f"'.' (not first)")
    return name


class TextInput:
    """An input file's text, decoded a line at a time from its bytes, so that bytes that are not UTF-8 are an
    InputError naming the file and the line (a text wrapper decodes ahead and would name neither). Lines end in
    "\n" ("\r\n" is read as "\n"); iteration, ``readline`` and ``read`` as a text file's."""

    def __init__(self, binary, path):
        self._f, self._path, self._line = binary, path, 0

    def _decode(self, raw, first_line):
        try:
            return raw.decode("utf-8").replace("\r\n", "\n")
        except UnicodeDecodeError as e:
            line = first_line + raw.count(b"\n", 0, e.start)
            raise InputError(f"{self._path}:{line}: not UTF-8 text (bytes {raw[e.start:e.start + 4]!r}); give the "
                             "file in UTF-8") from None

    def readline(self, size=-1):
        raw = self._f.readline(size)
        if raw:
            self._line += 1
        return self._decode(raw, self._line)

    def read(self, size=-1):
        raw = self._f.read(size)
        text = self._decode(raw, self._line + 1)
        self._line += raw.count(b"\n")
        return text

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open_input(path, mode="r"):
    """An input file opened for reading (text as UTF-8, ``TextInput``); a missing or unreadable file, or a
    directory, is an InputError. In binary mode a gzip file (known by its magic bytes, not its name) is read
    decompressed."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not a file")
    verify_input(path)
    try:
        if "b" in mode:
            with open(path, "rb") as f:
                if f.read(2) == b"\x1f\x8b":
                    return gzip.open(path, "rb")
            return open(path, "rb")
        return TextInput(open(path, "rb"), path)
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None


def read_input_bytes(path):
    """The whole of an input file as bytes, a gzip file decompressed (``open_input``); a truncated or corrupt
    compressed file is an InputError naming it."""
    with open_input(path, "rb") as f:
        try:
            return f.read()
        except (EOFError, OSError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
            raise InputError(f"{path}: truncated or corrupt compressed file ({e})") from None


# the longest JSONL line read (``--max-line-mb``): a line is held whole while parsed, and a file without newlines
# (a wrong file, /dev/zero) would otherwise be read into memory entire
MAX_LINE_BYTES = 64 << 20


def read_jsonl(path, required=()):
    """Yield ``(line_number, object)`` for each non-empty line of a plain or gzip file; any defect, a truncated
    compressed file or a line longer than ``MAX_LINE_BYTES`` included, names ``path:line``."""
    loads = orjson.loads
    limit = MAX_LINE_BYTES
    lineno = 0
    with open_input(path, "rb") as f:
        try:
            for lineno, raw in enumerate(iter(lambda: f.readline(limit + 1), b""), 1):
                if len(raw) > limit and raw[-1:] != b"\n":
                    raise InputError(f"{path}:{lineno}: line longer than {limit >> 20} MB (--max-line-mb)")
                try:
                    obj = loads(raw)
                except orjson.JSONDecodeError as e:
                    if not raw.strip():
                        continue
                    raise InputError(f"{path}:{lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
                if type(obj) is not dict:
                    raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
                for field in required:
                    if field not in obj:
                        raise InputError(f"{path}:{lineno}: missing field {field!r}")
                yield lineno, obj
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise InputError(f"{path}:{lineno + 1}: truncated or corrupt compressed file ({e})") from None


def read_trec_qrels(path):
    """TREC qrels ``qid 0 docid rel`` → {qid: {docid: rel}}; a malformed line names ``path:line``."""
    qrels = {}
    with open_input(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4 or not parts[3].lstrip("-").isdigit():
                raise InputError(f"{path}:{lineno}: expected 'qid 0 docid rel'")
            qrels.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return qrels


def dumps_line(obj):
    return orjson.dumps(obj).decode("utf-8") + "\n"


def json_bytes(value):
    """A value as UTF-8 JSON bytes, for writers that keep many pre-encoded pieces. The result is copied: the
    bytes object orjson returns keeps its whole output buffer (about 4 KB), 4 GB for a million short ids."""
    return bytes(memoryview(orjson.dumps(value)))


LOCK = ".lock"  # held (fcntl.flock) by the run writing a folder; removed when it ends


class FolderLock:
    """An advisory lock on an output folder for as long as one run writes it, so that a second run on the same
    folder is refused instead of interleaving its files with the first's. The lock file holds the owner's process
    id, for the error message, and is removed on release (a file left by a killed run is simply taken over)."""

    def __init__(self, directory):
        self.directory, self.path, self.fd = directory, os.path.join(directory, LOCK), None

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


def remove_entry(path):
    """Remove a file, a symbolic link (never what it points to) or a real directory tree; absent is fine."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass


STAGING = ".staging-"  # the prefix of a private folder a run writes its files in before they are moved into place


def private_dir(folder):
    """A fresh folder inside ``folder`` that no one else has written: ``tempfile.mkdtemp`` makes it exclusively,
    with a random name and mode 0700, so nothing planted in ``folder`` (a link at a temporary name) is ever written
    through. Every file the project writes is made in one, by its own code (``create``) or by a library that wants
    a path (numpy, matplotlib, faiss, ``save_pretrained``), and then moved into place (``put``)."""
    try:
        return tempfile.mkdtemp(prefix=STAGING, dir=folder)
    except OSError as e:
        raise write_error(folder, e) from None


def create(path, mode="w"):
    """A new file opened for writing, the one way this project creates a file: ``O_CREAT | O_EXCL | O_NOFOLLOW``,
    so an existing file or link at ``path`` is an error, never written through. Text is UTF-8."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")


def put(staged, final):
    """Move ``staged`` (a file or folder in a private folder) to ``final``: a file or link there is replaced, never
    followed; a folder there is removed first."""
    if os.path.isdir(final) and not os.path.islink(final):
        shutil.rmtree(final)
    os.replace(staged, final)


@contextlib.contextmanager
def writing(folder, name):
    """A path for ``folder/name`` in a private folder, moved into place when the block ends normally and removed
    with the private folder otherwise: the file (or folder) appears whole or not at all. Errors writing are one
    line naming ``folder`` (``write_error``)."""
    private = private_dir(folder)
    try:
        yield os.path.join(private, name)
        put(os.path.join(private, name), os.path.join(folder, name))
    except OSError as e:
        raise write_error(folder, e, private) from None
    finally:
        shutil.rmtree(private, ignore_errors=True)


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


def make_folder(directory):
    """``directory``, made if missing; one line if it is a file, cannot be made or is not writable."""
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise InputError(f"{directory}: exists and is not a directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise InputError(f"{directory}: cannot be created: {e.strerror}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{directory}: not writable")


def own_folder(directory):
    """The one way a script takes an output folder for its run: made if missing (``make_folder``) and locked
    (``FolderLock``), so that a second run on it is refused; returns the held lock. What may already be inside
    is for the caller to judge (``Outputs._claim`` for the scripts' outputs, ``Trainer._claim`` for a run folder,
    whose checkpoints a later run resumes from)."""
    make_folder(directory)
    return FolderLock(directory).acquire()


def fresh_dir(path):
    """A new empty folder at ``path`` made exclusively (``mkdir`` never follows a link), any entry of that name
    removed first (a link as a link): for a private folder that several processes must find by name."""
    remove_entry(path)
    os.mkdir(path, 0o700)
    return path


def append_line(path, line):
    """Append one line to a log file, created if missing; a link at ``path`` is refused, never followed."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(line)


class Outputs:
    """All files of one output directory, committed together.

    Every file is written in a private folder inside the directory (``private_dir``; ``open`` creates a file
    there, ``tmp_path`` gives a path there to writers that want one). Leaving the ``with`` block
    normally commits them; an exception removes the private folder, so a crash never leaves a partial file under a
    final name. A folder that cannot be made or written (an existing file, no permission, a full disk, any failing
    file operation) is an InputError naming it, one line.

    The commit is all or nothing for the scripts that read the folder: manifest.json names every file with its
    SHA-256; it is first written marked ``"state": "committing"``, then the files are moved into place, then it is
    written again without the mark. A reader (``verify_input``) refuses a folder whose manifest is marked or whose
    files do not match their hashes, so a run killed while committing never passes for a finished one.

    Nothing is written, replaced or removed through a symbolic link inside the folder: files are made only in the
    private folder, moved over a link (never through it), and a name whose parent folder is a link, or resolves
    outside the folder, is refused.

    With ``script``, the folder is that script's own: it is locked for the run (a second run on it is refused),
    a non-empty folder is refused unless its manifest.json comes from the same script (and ``command``, where the
    script has several), and once the new files are in place, those the previous manifest lists and this run did
    not write again are removed (with private folders a killed run left), so no stale file outlives its run.
    """

    def __init__(self, directory, script=None, command=None):
        self.directory = os.fspath(directory)
        self.script = script and os.path.basename(script)
        self.command = command
        self._files = {}
        self._previous = []
        self._lock = None
        self._stage = None
        self._manifest = None

    def __enter__(self):
        if self.script:
            self._lock = own_folder(self.directory)
            try:
                self._claim()
            except BaseException:
                self._lock.release()
                raise
        else:
            make_folder(self.directory)
        try:
            self._stage = private_dir(self.directory)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        return self

    def _claim(self):
        """Refuse a folder that is not this script's; note what its previous run wrote."""
        names = [n for n in os.listdir(self.directory) if not n.startswith(STAGING) and n != LOCK]
        if not names:
            return
        if "manifest.json" not in names:
            raise InputError(f"{self.directory}: not empty and not an output folder of this project (no "
                             "manifest.json); give a new or empty folder")
        try:
            previous = read_json_or_empty(self.path("manifest.json"))
        except (OSError, ValueError, InputError):
            previous = {}
        if not isinstance(previous, dict) or previous.get("script") != self.script:
            owner = previous.get("script") if isinstance(previous, dict) else None
            raise InputError(f"{self.directory}: holds the output of {owner or 'another program'}; {self.script} "
                             "writes to a folder of its own")
        previous_args = previous.get("args")
        previous_command = previous_args.get("command") if isinstance(previous_args, dict) else None
        if self.command and previous_command and previous_command != self.command:
            raise InputError(f"{self.directory}: holds the output of {self.script} {previous_command}; "
                             f"{self.script} {self.command} writes to a folder of its own")
        listed = [previous.get("files", [])]
        if previous.get("state") == "committing":  # a run killed while committing: what it replaced is stale too
            listed.append(previous.get("replacing", []))
        self._previous = [n for names in listed if isinstance(names, list) for n in names if isinstance(n, str)]

    def write_manifest(self, manifest):
        """manifest.json, the last file, with the list of files this run wrote (the next run removes those it does
        not write again) and their SHA-256 (readers check them); written when the folder is committed."""
        self._manifest = manifest

    def _remove_stale(self):
        stale = set(self._previous) - set(self._files)
        leftovers = [n for n in os.listdir(self.directory) if n.startswith(STAGING) and
                     os.path.join(self.directory, n) != self._stage]
        for name in sorted(stale) + leftovers:
            try:
                remove_entry(self.path(name))
            except (OSError, ValueError, InputError):  # a name no run of ours writes, or one that leaves the folder
                pass

    def path(self, name):
        """``name`` inside the folder; a name that would leave it, by its text or through a symbolic link on the
        way, is refused."""
        if os.path.isabs(name) or ".." in name.replace("\\", "/").split("/"):  # names pass safe_name first
            raise ValueError(f"{name!r} would leave {self.directory}")
        path = os.path.join(self.directory, name)
        parent = os.path.dirname(path)
        root, resolved = os.path.realpath(self.directory), os.path.realpath(parent)
        through_link = any(os.path.islink(os.path.join(self.directory, *name.split("/")[:k]))
                           for k in range(1, name.count("/") + 1))
        if through_link or (resolved != root and not resolved.startswith(root + os.sep)):
            raise InputError(f"{self.directory}: {name} would be written through a symbolic link; remove the link")
        return path

    def _staged(self, name):
        """Where ``name`` is written before the commit: in the private folder, its parent folders made there."""
        self.path(name)  # the name is checked against the final folder now, not only at the commit
        if name in self._files:
            raise ValueError(f"{name!r} is written twice into {self.directory}")
        staged = os.path.join(self._stage, name)
        try:
            os.makedirs(os.path.dirname(staged), exist_ok=True)
        except OSError as e:
            raise write_error(self.directory, e) from None
        return staged

    def open(self, name, mode="w"):
        staged = self._staged(name)
        try:
            f = create(staged, mode)
        except OSError as e:
            raise write_error(self.directory, e) from None
        self._files[name] = f
        return f

    def tmp_path(self, name):
        """A path for writers that want a file or folder name (numpy, matplotlib, gensim's models), in the private
        folder; committed like the others (a folder replaces the folder ``name``)."""
        staged = self._staged(name)
        self._files[name] = None
        return staged

    def scratch(self, name):
        """A path in a private folder for a file the run needs while it works and does not commit; removed with
        the private folder at the end."""
        scratch = os.path.join(self._stage, ".scratch")
        os.makedirs(scratch, exist_ok=True)
        return os.path.join(scratch, name)

    def _hashes(self):
        found = {}
        for name in sorted(self._files):
            staged = os.path.join(self._stage, name)
            if os.path.isdir(staged):
                for d, _, files in sorted(os.walk(staged)):
                    for f in sorted(files):
                        full = os.path.join(d, f)
                        found[os.path.relpath(full, self._stage)] = sha256(full)
            elif os.path.isfile(staged):
                found[name] = sha256(staged)
        return found

    def _write_manifest(self, manifest, final):
        staged = os.path.join(self._stage, "manifest.json")
        remove_entry(staged)
        with create(staged) as f:
            f.write(dumps_line(manifest))
            f.flush()
            os.fsync(f.fileno())
        put(staged, final)

    def _commit(self):
        names = sorted(self._files)
        manifest = None
        if self._manifest is not None:
            manifest = {**self._manifest, "files": names, "sha256": self._hashes()}
            self._write_manifest({**manifest, "state": "committing", "replacing": sorted(self._previous)},
                                 self.path("manifest.json"))
        for name in names:
            put(os.path.join(self._stage, name), self.path(name))
        if manifest is not None:
            self._write_manifest(manifest, self.path("manifest.json"))
            self._files["manifest.json"] = None
        if self.script:
            self._remove_stale()

    def __exit__(self, exc_type, exc, tb):
        try:
            try:
                for f in self._files.values():
                    if f is not None and not f.closed:
                        f.close()  # flushes: a full disk may show only here
                if exc_type is None:
                    self._commit()
                    return False
            except OSError as e:
                exc = e
            if isinstance(exc, OSError) and (exc_type is None or exc.errno in WRITE_ERRNOS):
                error = write_error(self.directory, exc, self._stage)
                shutil.rmtree(self._stage, ignore_errors=True)
                raise error from None
            if exc is not None and exc_type is None:
                raise exc
            return False
        finally:
            shutil.rmtree(self._stage, ignore_errors=True)
            if self._lock is not None:
                self._lock.release()


# what only writing can fail with (reading an input cannot), so it is reported against the output folder
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def open_npy(outputs, name, shape, dtype="float32"):
    """A memory-mapped NPY under ``outputs``' temporary path for ``name``, written row by row by its producer and
    committed with the folder's other files: the same bytes as ``np.save`` of the finished array, never the whole
    array in memory. Its bytes are allocated on disk first (``reserve``), so a full disk is one line, not SIGBUS."""
    from numpy.lib.format import open_memmap
    path = outputs.tmp_path(name)
    array = open_memmap(path, mode="w+", dtype=dtype, shape=tuple(shape))
    reserve(path, os.path.getsize(path), outputs.directory)
    return array


def write_ids(outputs, name, ids):
    """``name.ids.txt``: the id of each row of ``name.npy``, one a line."""
    with outputs.open(f"{name}.ids.txt") as f:
        f.writelines(f"{i}\n" for i in ids)


def open_rows(outputs, name, ids, dim, dtype="float32"):
    """``name.ids.txt`` written and ``name.npy`` opened memory-mapped (``open_npy``) for a ``dim``-wide row per
    id, for its producer to fill."""
    write_ids(outputs, name, ids)
    return open_npy(outputs, f"{name}.npy", (len(ids), dim), dtype)


def read_rows(directory, name, ids):
    """``directory/name.npy``, memory-mapped, checked against ``directory/name.ids.txt`` and the documents'
    ``ids`` (docs.jsonl's, line by line), so that rows are never paired with the wrong documents."""
    import numpy as np
    path, ids_path = os.path.join(directory, f"{name}.npy"), os.path.join(directory, f"{name}.ids.txt")
    for p in (path, ids_path):
        if not os.path.isfile(p):
            raise InputError(f"{p}: no such file")
    with open_input(ids_path) as f:
        found = [line.rstrip("\n") for line in f]
    for lineno, (got, want) in enumerate(zip(found, ids), 1):
        if got != want:
            raise InputError(f"{ids_path}:{lineno}: id {got!r}, but docs.jsonl has {want!r} there")
    if len(found) != len(ids):
        raise InputError(f"{ids_path}: {len(found)} ids, docs.jsonl has {len(ids)} documents")
    verify_input(path)
    with open(path, "rb") as f:  # np.load would also open a zip archive (.npz) or a pickle by their magic
        if f.read(len(NPY_MAGIC)) != NPY_MAGIC:
            raise InputError(f"{path}: not a NumPy array file (it does not start as one)")
    try:  # numpy's header parser raises any of these for a header it cannot read or a file that ends early
        array = np.load(path, mmap_mode="r")
    except (ValueError, EOFError, OSError, SyntaxError, tokenize.TokenError) as e:
        raise InputError(f"{path}: not a NumPy array file ({e})") from None
    if array.ndim == 0 or len(array) != len(ids):
        raise InputError(f"{path}: {len(array) if array.ndim else 0} rows, {ids_path} names {len(ids)}")
    check_finite_rows(array, path, ids)
    return array


NPY_MAGIC = b"\x93NUMPY"


def check_finite_rows(array, path, ids=None, chunk=65_536):
    """InputError naming the first row of a float array that holds a NaN or an infinity (one would turn every score
    against it into NaN), read a chunk of rows at a time; other dtypes pass."""
    import numpy as np
    if not np.issubdtype(array.dtype, np.floating):
        return
    bad = []
    for start in range(0, len(array), chunk):
        rows = np.asarray(array[start:start + chunk]).reshape(min(chunk, len(array) - start), -1)
        bad.extend((start + np.flatnonzero(~np.isfinite(rows).all(axis=1))).tolist())
    if bad:
        which = f" (document {ids[bad[0]]!r})" if ids is not None else ""
        raise InputError(f"{path}: row {bad[0]}{which} is not finite ({len(bad)} of {len(array)} rows are not)")


def write_json(path, obj):
    """Write one JSON file whole or not at all (``writing``)."""
    folder, name = os.path.split(os.path.abspath(path))
    with writing(folder, name) as staged, create(staged) as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


_HASHED = {}  # (path, inode, size, mtime, ctime) → SHA-256: a file is read once a process unless it is written


def sha256(path):
    """A file's SHA-256, remembered for as long as the file is not written (ctime moves on any write, even one
    that keeps the size and sets the old mtime back), so that checking an input (``verify_input``), a faiss
    index's record and a manifest's ``inputs`` read a large file once."""
    stat = os.stat(path)
    key = (os.path.abspath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


def _git_commit():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


_PACKAGES = ("torch", "transformers", "accelerate", "sentence-transformers", "numpy", "scipy", "scikit-learn",
             "gensim", "nltk", "tokenizers")


def _versions():
    found = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def manifest(script, args, started, inputs=(), counts=None, seed=None, **extra):
    """The manifest every output directory gets (docs/contract.md)."""
    return {
        "script": os.path.basename(script),
        "argv": sys.argv,
        "args": {k: v for k, v in vars(args).items() if not callable(v)},
        "started": started,
        "finished": now(),
        "git_commit": _git_commit(),
        "versions": _versions(),
        "seed": seed,
        "inputs": {p: sha256(p) for p in inputs if os.path.isfile(p)},
        "counts": counts or {},
        **extra,
    }


def read_json_or_empty(path):
    """A JSON file's value, or {} where there is no file; a file that is not JSON text is an InputError."""
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:  # UnicodeDecodeError is one
        raise InputError(f"{path}: not JSON text ({e})") from None
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None


# the manifest fields that readers use, with their types (docs/contract.md)
MANIFEST_FIELDS = {"script": str, "state": str, "language": str, "args": dict, "inputs": dict, "counts": dict,
                   "sha256": dict, "files": list}


def read_manifest(directory):
    """A folder's manifest.json ({} where there is none), its fields that readers use of their types."""
    path = os.path.join(directory, "manifest.json")
    manifest = read_json_or_empty(path)
    if not isinstance(manifest, dict):
        raise InputError(f"{path}: not a manifest (a JSON object); re-run the step that wrote {directory}")
    for field, kind in MANIFEST_FIELDS.items():
        if manifest.get(field) is not None and not isinstance(manifest[field], kind):
            raise InputError(f"{path}: field {field!r} is not a JSON {'string' if kind is str else kind.__name__}; "
                             f"re-run the step that wrote {directory}")
    return manifest


def source_language(path):
    """The language 01 recorded in the manifest beside an input file (a dump's), or None."""
    return read_manifest(os.path.dirname(os.path.abspath(path))).get("language")


def verify_input(path):
    """Refuse an input file that is not what the run that wrote its folder committed: its folder's manifest.json
    is still marked ``committing`` (the run was killed while moving its files into place, so old and new files may
    lie side by side), or the file's SHA-256 differs from the one the manifest names. A folder without a manifest,
    or a file the manifest does not name, was made by hand and is read as it is."""
    folder, name = os.path.split(os.path.abspath(path))
    manifest_path = os.path.join(folder, "manifest.json")
    if name == "manifest.json" or not os.path.isfile(manifest_path):
        return
    try:
        manifest = read_manifest(folder)
    except InputError:
        raise InputError(f"{manifest_path}: not a readable JSON manifest; re-run the step that wrote {folder}") \
            from None
    if manifest.get("state") == "committing":
        raise InputError(f"{folder}: its run stopped while committing its files (manifest.json is marked "
                         f"'committing'); run {manifest.get('script') or 'it'} again")
    expected = manifest.get("sha256")
    if not isinstance(expected, dict) or name not in expected:
        return
    if sha256(path) != expected[name]:
        raise InputError(f"{path}: differs from what {manifest.get('script') or 'its run'} wrote (SHA-256 in "
                         f"{manifest_path}); it changed afterwards, or its run did not finish: run it again")


class TokenTable:
    """Pre-encoded pieces of JSON text, padded with tabs to one width, so that a file is assembled from them by a
    single numpy gather instead of one Python string operation per piece.

    The pieces are every template (bytes with one ``%s``) applied to every value, template by template, then the
    ``tail`` pieces; they are made a slice at a time, so building the table takes little more than the table.
    JSON never holds a raw tab inside a string (it is escaped as ``\\t``), so dropping every tab after the gather
    gives back the exact compact text. Memory: number of pieces × the longest piece.
    """

    def __init__(self, templates, values, tail=()):
        import numpy as np
        longest = max(map(len, values), default=0)
        width = max([len(t) - 2 + longest for t in templates] + [len(p) for p in tail])
        self.table = np.empty(len(templates) * len(values) + len(tail), dtype=f"S{width}")
        step = 65536
        for k, template in enumerate(templates):
            for start in range(0, len(values), step):
                part = values[start:start + step]
                at = k * len(values) + start
                self.table[at:at + len(part)] = [(template % v).ljust(width, b"\t") for v in part]
        self.table[len(templates) * len(values):] = [p.ljust(width, b"\t") for p in tail]

    def render(self, index):
        return self.table[index].tobytes().replace(b"\t", b"")
