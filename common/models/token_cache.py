"""The masked LM's token cache: a folder of Arrow files that ``datasets.map`` writes (the sentences of next-sentence
pairs) and learnt vocabularies, keyed by their texts and settings and read again by later runs. A cache is no run's
result, so a damaged file in it is made again; what is not a file the cache writes is refused in one line."""

import os

from common.io import InputError
from common.outdir.write_errors import write_error


def cache_folder(path):
    """``path`` made as the cache's folder where it is missing; a file there or above it, or a folder that cannot
    be made, is one line."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise InputError(f"{path}: a file, not a folder for the masked LM's cache; give --cache-dir a folder "
                         "(or remove the file)")
    try:
        os.makedirs(path, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InputError(f"{path}: cannot be made as the masked LM's cache folder: a file stands where a folder "
                         "above it should be") from None
    except OSError as e:
        raise write_error(path, e, left="no cache was made") from None
    return path


def cached_map(ds, encode, path, features, say=print, **kwargs):
    """``ds.map(encode)`` written into the Arrow file ``path``, or read from it where an earlier run wrote it. A
    file there that cannot be read, or whose rows or columns are not the map's (damaged, truncated, another's), is
    removed and made again, with a note; an entry there that is no file (a folder, a link) is one line."""
    import datasets
    import pyarrow
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
        raise InputError(f"{path}: not a file of the masked LM's cache (a folder or a link); remove it")
    if os.path.exists(path):
        try:
            cached = datasets.Dataset.from_file(path)
            whole = len(cached) == len(ds) and cached.features == features
        except (OSError, ValueError, pyarrow.ArrowException):
            whole = False
        if not whole:
            say(f"note: {path}: a damaged cache file (not the rows of these texts); made again")
            os.remove(path)
    try:
        return ds.map(encode, cache_file_name=path, features=features, **kwargs)
    except OSError as e:
        raise write_error(os.path.dirname(path), e, left="no cache file was made") from None
