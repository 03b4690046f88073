"""The manifest of a reproduction, for docs/results.md: each step's command line as it ran, the code's commit, the
library versions and the counts each step recorded, read from the output folders' manifest.json (01, 02, 04, 05)
and run.json (03).

    python reproduce/manifests.py work/foldoc work/foldoc-data work/wikispecter work/wikispecter-eval
"""

import argparse
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import cli, io  # noqa: E402


def read(folder):
    """(argv, commit, versions, counts) of one output folder, or None where it has no manifest."""
    if not os.path.isdir(folder):
        raise io.InputError(f"{folder}: no such folder")
    manifest = io.read_manifest(folder)
    if not manifest:
        return None
    argv, versions = manifest.get("argv") or [], manifest.get("versions") or {}
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not isinstance(versions, dict):
        raise io.InputError(f"{os.path.join(folder, 'manifest.json')}: argv is not a list of strings or versions "
                            "not an object; re-run the step that wrote it")
    return argv, manifest.get("git_commit"), versions, manifest.get("counts") or {}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", help="output folders, in the order the steps ran")
    args = p.parse_args(argv)
    commits, versions, lines = set(), {}, []
    for folder in args.folders:
        found = read(folder)
        if found is None:
            lines.append(f"    # {folder}: no manifest.json")
            continue
        command, commit, found_versions, counts = found
        commits.add(str(commit) if commit else None)
        versions.update(found_versions)
        root = os.getcwd() + os.sep
        lines.append(f"    python {shlex.join(a.replace(root, '') for a in command)}")
        shown = ", ".join(f"{k} {v}" for k, v in counts.items() if isinstance(v, (int, float)))
        if shown:
            lines.append(f"    #   {shown}")
    print("```")
    print("\n".join(lines))
    print("```")
    print(f"\ncommit {', '.join(sorted(c or 'unknown' for c in commits))}; "
          + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
