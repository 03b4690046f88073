"""An output folder owned by one run: its lock, the private folder every file is made in and moved from, the
all-or-nothing commit with a manifest that records the run's start and finish (``Outputs``), and the one-line
errors of a folder that cannot be written (a full disk, no permission). Reading inputs and manifests is
``common.io``'s; what a manifest records, ``common.outdir.provenance``'s."""

import contextlib
import json
import os
import re
import shutil
import tempfile

from common.outdir import provenance
from common.io import InputError, read_json_or_empty, sha256
from common.outdir.folder_lock import LOCK, FolderLock
from common.jsontext import dumps_line
from common.outdir.write_errors import WRITE_ERRNOS, write_error
from common.outdir.written import entries, previous_files, remove_entry, remove_written


STAGING = ".staging-"  # the prefix of a private folder a run writes its files in before they are moved into place
# a folder inside an output folder where a run that replaces a finished one writes until it is moved into place
# (a training run with --overwrite: run_folder.NEXT)
REPLACING = ".next-run"


def final_path(path):
    """``path`` as it will be once a run that replaces a finished one is moved into place (``REPLACING`` left out):
    what a file written there (a model card) names."""
    parts = os.path.normpath(path).split(os.sep)
    return os.sep.join(p for p in parts if p != REPLACING) or path
# what follows the prefix: mkdtemp's random tail (a test's hand-made one may hold capitals); never a '.' or '-', so
# that the private folders of one output (``.staging-TAIL``, ``.staging-FILE-TAIL``) are never another's
_TAIL = "[A-Za-z0-9_]+"


def private_dir(folder, prefix=STAGING):
    """A fresh folder inside ``folder`` that no one else has written: ``tempfile.mkdtemp`` makes it exclusively,
    with a random name after ``prefix`` and mode 0700, so nothing planted in ``folder`` (a link at a temporary name)
    is ever written through. Every file the project writes is made in one, by its own code (``create``) or by a
    library that wants a path (numpy, matplotlib, faiss, ``save_pretrained``), and then moved into place (``put``).
    It lies in the folder the file goes to, so that a run killed meanwhile leaves it where the next run on that
    folder removes it (``remove_leftovers``)."""
    try:
        return tempfile.mkdtemp(prefix=prefix, dir=folder)
    except OSError as e:
        raise write_error(folder, e) from None


def is_private(name, prefix=STAGING):
    """Whether ``name`` is a private folder ``private_dir(..., prefix)`` made: the prefix and a random tail, and
    nothing else (``.staging-a-TAIL`` is not one of ``.staging-``'s, nor ``.staging-a-b.jsonl-TAIL`` of
    ``.staging-a-``'s)."""
    return re.fullmatch(re.escape(prefix) + _TAIL, name) is not None


def file_names(file):
    """The names one output file ``file`` (05 extract's ``--out``) puts beside itself in a folder that is not its
    own, each unique to that file name: its lock, the prefix of its private folders and its manifest. A file whose
    own name is one of another output's (hidden and ending ``.lock``, a private folder's, a manifest's) is refused,
    so that no output's name is ever another's."""
    if file.endswith(MANIFEST_SUFFIX) or file.startswith(STAGING) or (file.startswith(".") and
                                                                       file.endswith(".lock")):
        raise InputError(f"{file}: a name this project keeps for what an output puts beside itself (a lock, a "
                         f"private folder, a manifest); give another --out")
    return f".{file}.lock", f"{STAGING}{file}-", file + MANIFEST_SUFFIX


MANIFEST_SUFFIX = ".manifest.json"


def create(path, mode="w"):
    """A new file opened for writing, the one way this project creates a file: ``O_CREAT | O_EXCL | O_NOFOLLOW``,
    so an existing file or link at ``path`` is an error, never written through. Text is UTF-8."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")


def put(staged, final):
    """Move ``staged`` (a file or folder in a private folder) to ``final``: a file or link there is replaced, never
    followed; a folder there is first moved aside into a private folder beside ``staged`` and removed once the new
    one is in place."""
    if os.path.isdir(final) and not os.path.islink(final):
        aside = tempfile.mkdtemp(prefix=STAGING, dir=os.path.dirname(staged))
        os.replace(final, os.path.join(aside, "old"))
        os.replace(staged, final)
        shutil.rmtree(aside, ignore_errors=True)
        return
    os.replace(staged, final)


def put_written(staged, final, written, keep=()):
    """Move ``staged`` to ``final``, where a previous run may have left what it wrote: ``written``, the paths under
    the folder ``final`` that run wrote (relative to it), and ``keep``, those this run writes there. A file or link
    at ``final``, or a folder that holds nothing else, is replaced whole (``put``). A folder that also holds what
    no run listed (a user's notes) keeps it: the new files are moved in one by one, then the previous run's that
    this one does not write again are removed by name (``remove_written``); a user's file where a new one must go
    is refused in one line."""
    if not os.path.isdir(final) or os.path.islink(final):
        if os.path.isdir(staged) and os.path.lexists(final):
            remove_entry(final)  # a file or link at the name of a folder this run writes
        put(staged, final)
        return
    written = set(written)
    others = [name for name in entries(final) if name not in written]
    if not others:
        put(staged, final)
        return
    if not os.path.isdir(staged) or os.path.islink(staged):
        raise InputError(f"{final}: a folder holding files this project did not write ({others[0]}) is in the "
                         "way of a file; move it")
    new = entries(staged)
    for name in new:
        parts = name.split("/")
        for k in range(1, len(parts)):
            _clear_way(final, "/".join(parts[:k]), written, folder=True)
            way = os.path.join(final, *parts[:k])
            if not os.path.isdir(way):
                os.mkdir(way)
        source, target = os.path.join(staged, *parts), os.path.join(final, *parts)
        if os.path.isdir(source) and not os.path.islink(source):
            _clear_way(final, name, written, folder=True)
            if not os.path.isdir(target):
                os.mkdir(target)
        else:
            _clear_way(final, name, written, folder=False)
            os.replace(source, target)  # a file or link at the name is replaced by name, never followed
    remove_written(final, sorted(written - set(keep) - set(new)))


def _clear_way(final, name, written, folder):
    """Make room at ``final/name`` for a folder (``folder``) or a file of a new run: what is there of the wrong
    kind is removed where the previous run wrote it (``written``), and refused in one line where it did not."""
    path = os.path.join(final, *name.split("/"))
    if not os.path.lexists(path):
        return
    is_folder = os.path.isdir(path) and not os.path.islink(path)
    if is_folder == folder:
        return
    mine = [name] if not is_folder else [name + "/" + rel for rel in entries(path)]
    if any(n not in written for n in mine):
        raise InputError(f"{path}: {'a folder holding files' if is_folder else 'a file'} this project did not "
                         f"write is in the way of what it writes there; move it")
    remove_entry(path)


@contextlib.contextmanager
def writing(folder, name):
    """A path for ``folder/name`` in a private folder, moved into place when the block ends normally and removed
    with the private folder otherwise: the file (or folder) appears whole or not at all. Errors writing are one
    line naming ``folder`` (``write_error``). The private folder is named after the file (``.staging-NAME-TAIL``),
    so that no other output's clean-up in the same folder takes it for its own."""
    private = private_dir(folder, f"{STAGING}{name}-")
    try:
        yield os.path.join(private, name)
        put(os.path.join(private, name), os.path.join(folder, name))
    except OSError as e:
        raise write_error(folder, e, private) from None
    finally:
        shutil.rmtree(private, ignore_errors=True)


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


def finished_error(directory, what):
    """The one-line refusal of a folder that holds ``what``, finished (the output of a script and command, a run)."""
    return InputError(f"{directory}: holds a finished {what}; give --overwrite to replace it (only what that run "
                      "wrote is removed), or another --out")


def refuse_finished(directory, script, command=None, manifest=None):
    """Refuse (``finished_error``) a folder whose manifest (``manifest``, else read) says it holds a finished output
    of ``script``: what ``Outputs`` refuses without ``overwrite``, checked by every process of a command that
    several processes run before they part (so that none waits for one that stopped)."""
    if manifest is None:
        try:
            manifest = read_json_or_empty(os.path.join(directory, "manifest.json"))
        except InputError:
            manifest = {}
    if isinstance(manifest, dict) and manifest.get("script") == os.path.basename(script) \
            and manifest.get("state") != "committing":
        raise finished_error(directory, f"output of {os.path.basename(script)}{' ' + command if command else ''}")


def remove_leftovers(directory, prefix=STAGING):
    """Remove the private folders (named ``prefix`` and a random tail, ``is_private``) a killed run left in
    ``directory``: a run holding the lock that guards them calls it, so none of them is another live run's, nor
    one of another output's beside it (whose names hold more after the prefix)."""
    for name in os.listdir(directory):
        if is_private(name, prefix):
            remove_entry(os.path.join(directory, name))


def own_folder(directory):
    """The one way a script takes an output folder for its run: made if missing (``make_folder``) and locked
    (``FolderLock``), so that a second run on it is refused; returns the held lock. What may already be inside
    is for the caller to judge (``Outputs._claim`` for the scripts' outputs, ``RunFolder.claim`` for a run folder,
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

    With ``script`` and no ``file``, the folder is that script's own: it is locked for the run (a second run on it
    is refused), a non-empty folder is refused unless its manifest.json comes from the same script (and
    ``command``, where the script has several), a finished output (a manifest not marked ``committing``) is refused
    unless ``overwrite`` says to replace it, private folders a killed run left are removed, and once the new files
    are in place, those the previous manifest lists and this run did not write again are removed, so no stale file
    outlives its run. Until then the previous output stays whole.
    A file the previous manifest does not list was not written by this project and is never removed, nor one inside
    a folder the previous run wrote (``put_written``); what a manifest lists is read as input: only a
    ``written_name`` inside the folder is ever removed (``previous_files``).

    With ``file``, the run writes that one file (and files named after it) into a folder that is not its own (05
    extract's ``--out`` file): the lock, the private folder and the manifest are named after the whole file name
    (``.FILE.lock``, ``.staging-FILE-TAIL``, ``FILE.manifest.json``: ``file_names``), so that runs writing other
    files into the same folder go on beside it and never take one of its names, and what a killed run writing the
    same file left is removed.

    The folder records when it was opened (``started``); ``finish`` writes the run's manifest with it.
    """

    def __init__(self, directory, script=None, command=None, overwrite=False, file=None):
        self.directory = os.fspath(directory)
        self.script = script and os.path.basename(script)
        self.command = command
        self.overwrite = overwrite
        self.file = file
        self._lock_name, self._prefix, self._manifest_name = file_names(file) if file else (LOCK, STAGING,
                                                                                              "manifest.json")
        self._files = {}
        self._previous = set()
        self._lock = None
        self._stage = None
        self._manifest = None
        self.started = None

    def __enter__(self):
        self.started = provenance.now()
        if self.script and not self.file:
            self._lock = own_folder(self.directory)
            try:
                self._claim()
            except BaseException:
                self._lock.release()
                raise
        else:
            make_folder(self.directory)
            if self.file:
                self._lock = FolderLock(self.directory, self._lock_name).acquire()
                remove_leftovers(self.directory, self._prefix)
        try:
            self._stage = private_dir(self.directory, self._prefix)
        except BaseException:
            if self._lock is not None:
                self._lock.release()
            raise
        return self

    def _claim(self):
        """Refuse a folder that is not this script's, or holds its finished output without ``overwrite``; remove what
        a killed run left; note what the previous run wrote."""
        names = [n for n in os.listdir(self.directory) if not is_private(n) and n != LOCK]
        if not names:  # new, or holding only what a run killed before its commit left
            remove_leftovers(self.directory)
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
        if not self.overwrite:
            refuse_finished(self.directory, self.script, self.command, previous)
        remove_leftovers(self.directory)
        self._previous = previous_files(previous)

    def finish(self, args, inputs=(), counts=None, seed=None, **extra):
        """The run's manifest, in one call: ``provenance.manifest`` of this folder's script, ``args``, the start
        recorded when the folder was opened, ``inputs`` (their SHA-256), ``counts``, ``seed`` and ``extra`` fields,
        finished now. A folder of the script's own takes it as manifest.json (``write_manifest``); the one file of a
        folder not its own, as ``FILE.manifest.json``, a file like the others."""
        manifest = provenance.manifest(self.script, args, self.started, inputs, counts, seed, **extra)
        if not self.file:
            return self.write_manifest(manifest)
        with self.open(self._manifest_name) as f:
            f.write(dumps_line(manifest))

    def write_manifest(self, manifest):
        """manifest.json, the last file, with the list of files this run wrote (the next run removes those it does
        not write again) and their SHA-256 (readers check them); written when the folder is committed."""
        self._manifest = manifest

    def _remove_stale(self):
        """The previous run's files under names this run did not write, removed by name (``remove_written``)."""
        remove_written(self.directory, sorted(n for n in self._previous if n.split("/")[0] not in self._files))

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
        hashes = self._hashes()
        manifest = None
        if self._manifest is not None:
            manifest = {**self._manifest, "files": names, "sha256": hashes}
            self._write_manifest({**manifest, "state": "committing", "replacing": sorted(self._previous)},
                                 self.path("manifest.json"))
        for name in names:
            under = name + "/"
            put_written(os.path.join(self._stage, name), self.path(name),
                        [n[len(under):] for n in self._previous if n.startswith(under)],
                        [n[len(under):] for n in hashes if n.startswith(under)])
        if self.script and not self.file:
            self._remove_stale()  # while the manifest still says what it replaces: a kill here leaves none for good
        if manifest is not None:
            self._write_manifest(manifest, self.path("manifest.json"))
            self._files["manifest.json"] = None

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


def write_json(path, obj):
    """Write one JSON file whole or not at all (``writing``)."""
    folder, name = os.path.split(os.path.abspath(path))
    with writing(folder, name) as staged, create(staged) as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
