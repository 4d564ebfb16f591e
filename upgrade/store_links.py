"""No mqupgrade command follows a symbolic link out of the store it was given (issue 23.8).

Rules:
- Before a command reads or writes a store, every entry under the store root (and under a
  commitlog directory configured outside it) is looked at with ``lstat``: a symbolic link
  anywhere in the tree is refused, naming the link, where it points and the fix. A store
  written by RocketMQ (Apache's or ours) never contains links, so a link is either an
  operator's hand-made layout or somebody trying to make a root-run tool write elsewhere
  (``apply --freeze`` once wrote 8 bytes outside the store through a linked commitlog file).
- The directory the operator named may itself be a link (they chose it); it is resolved once
  and everything below it must be real.
- Belt and braces: the files the tool opens are opened with ``O_NOFOLLOW``
  (``upgrade.fileops``, ``broker.store.freeze``), so a link swapped in after the check fails
  with ELOOP instead of being followed.

Theory of operation: one ``os.walk`` (which does not descend into linked directories) per
tree, checking directory and file entries alike; the caller passes its own error class so
each command reports the refusal the way it reports everything else.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional, Type


def find_link(root: str | os.PathLike[str]) -> Optional[tuple[Path, str]]:
    """The first symbolic link under ``root`` (not ``root`` itself) and its target, else None."""
    base = Path(root).resolve()
    if not base.is_dir():
        return None
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        for name in sorted(dirnames) + sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                return path, os.readlink(path)
    return None


def refuse_links(dirs: Iterable[Optional[str | os.PathLike[str]]], error: Type[Exception]) -> None:
    """Raise ``error`` naming the first symbolic link found under any of ``dirs``."""
    for d in dirs:
        if d is None:
            continue
        found = find_link(d)
        if found is not None:
            link, target = found
            raise error(f"{link} is a symbolic link (to {target}); mqupgrade does not follow links out of the store "
                        f"it is given. Replace it with the real file or directory (or name the real directory in "
                        f"the conf, e.g. storePathCommitLog), then run the command again")
