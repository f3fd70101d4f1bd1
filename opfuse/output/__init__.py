"""Every file and folder opfuse writes goes through this package (docs/architecture.md, "Outputs
and limits"). The rules, one place for every command and option:

- the input model is never written: an output that is the same file (by path, symlink or hard link)
  is refused with one line;
- a regular file, or a path that does not exist yet, is written to a temporary file in the same
  folder and renamed over it, so a failure leaves the old file as it was; a symlink to a regular
  file has its target written (the link stays a link);
- anything else that exists (a FIFO, a character or block device, ``/dev/stdout``, a
  ``/proc/self/fd/N`` pipe) is opened and written into, never replaced;
- ``-`` is standard output;
- a folder (``--emit c -o DIR``) is written whole into a fresh sibling folder and moved into place
  only when complete; a folder holding files opfuse did not write is refused unless ``force``.

Written files get the mode a plain ``open()`` gives a new file (0644 under umask 022).
"""

from __future__ import annotations

from opfuse.output.files import (
    STDOUT,
    check_output,
    commit_file,
    current_umask,
    staging_folder,
    umask_mode,
    write_file,
)
from opfuse.output.tree import write_tree

__all__ = [
    "STDOUT",
    "check_output",
    "commit_file",
    "current_umask",
    "staging_folder",
    "umask_mode",
    "write_file",
    "write_tree",
]
