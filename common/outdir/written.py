"""What a previous run wrote, by name, and removing it: the names a manifest may list (``written_name``), the way to
them inside the folder (``inside``), what a run's manifest says it wrote (``previous_files``) and its removal
(``remove_written``). What a manifest lists is input like any other: only such names are ever removed."""

import os
import shutil


def remove_entry(path):
    """Remove a file, a symbolic link (never what it points to) or a real directory tree; absent is fine."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass


def written_name(name):
    """Whether ``name`` (a path relative to an output folder, parts separated by '/') is one the project writes, and
    so one that may be removed as a previous run's file: every part a plain name (not empty, not '.' or '..', not
    hidden like the project's private folders and locks, no separator or NUL). What a manifest lists is input
    like any other: a name that fails this is never removed."""
    return isinstance(name, str) and 0 < len(name) <= 4096 and all(
        part and part[0] != "." and "\\" not in part and "\0" not in part
        and len(part.encode("utf-8", "replace")) <= 255 for part in name.split("/"))


def inside(directory, name):
    """``directory/name`` for a ``written_name`` whose way there passes no symbolic link (the last part may be one:
    it is removed or replaced as a link); None for any other name."""
    if not written_name(name):
        return None
    parts = name.split("/")
    for k in range(1, len(parts)):
        way = os.path.join(directory, *parts[:k])
        if os.path.islink(way) or not os.path.isdir(way):
            return None
    return os.path.join(directory, *parts)


def entries(path):
    """The files, links and empty folders under the folder ``path`` (links not followed), as paths relative to it
    with '/' between parts."""
    found = []
    for d, dirs, files in os.walk(path):
        rel = os.path.relpath(d, path).replace(os.sep, "/")
        prefix = "" if rel == "." else rel + "/"
        links = [n for n in dirs if os.path.islink(os.path.join(d, n))]  # os.walk lists a link to a folder there
        found += [prefix + n for n in files + links]
        if not files and not dirs and prefix:
            found.append(rel)
    return found


def remove_written(directory, names):
    """Remove from ``directory`` the files ``names`` (as a previous run recorded what it wrote: paths relative to
    the folder), then the folders they leave empty. Only a ``written_name`` whose way stays inside the folder is
    removed (``inside``), a link as a link; a name that is a folder is removed only once empty, so a file no run
    listed (a user's) keeps it."""
    folders = set()
    for name in names:
        path = inside(directory, name)
        if path is None:
            continue
        parts = name.split("/")
        folders.update("/".join(parts[:k]) for k in range(1, len(parts)))
        if os.path.isdir(path) and not os.path.islink(path):
            folders.add(name)
            continue
        try:
            os.remove(path)
        except OSError:  # gone, or not ours to remove (no permission): it stays
            pass
    for name in sorted(folders, key=lambda n: n.count("/"), reverse=True):  # the deepest first
        path = inside(directory, name)
        if path is not None and not os.path.islink(path):
            try:
                os.rmdir(path)
            except OSError:  # not empty (a file no run listed), or gone
                pass


def previous_files(manifest):
    """What the run that wrote ``manifest`` wrote, by name: its ``files`` (names in the folder) and the files of
    its ``sha256`` under them (``folder/file``), and while it was committing what it was replacing. A manifest is
    input like any other: only a ``written_name`` is taken, so that ``.``, ``..``, an absolute path, a hidden name
    or a file under a name the run did not list is never removed."""
    if not isinstance(manifest, dict):
        return set()
    lists = [manifest.get("files")] + ([manifest.get("replacing")] if manifest.get("state") == "committing" else [])
    found = set()
    for names in lists:
        names = [n for n in names if written_name(n)] if isinstance(names, list) else []
        top = {n for n in names if "/" not in n}
        found |= top | {n for n in names if n.split("/")[0] in top}
    hashed = manifest.get("sha256")
    if isinstance(hashed, dict):
        found |= {n for n in hashed if written_name(n) and n.split("/")[0] in found}
    return found
