"""Writing report files the user names (the vLLM connector's stats_file) without following links,
and reading the secrets it names.

replace_regular_file(path, text) writes `text` to a fresh temporary in the same directory, named
".<name>.tmp.<16 random hex digits>" and created with O_CREAT|O_EXCL|O_NOFOLLOW (so nothing a
local user planted under a guessable name is followed or truncated), then renames it over
`path`, so a reader never sees half a file. A `path` that exists and is not a regular file (a
FIFO, a device node such as /dev/null, a directory, a symbolic link) is refused with ValueError
naming what it is, and left as it was. The C++ side does the same for `kvtier --metrics-file`
(src/env/dir_trust.h, ReplaceRegularFile).

read_secret_file(path, what) returns a secret file's bytes, stripped. It opens with O_NONBLOCK
(a FIFO without a writer would make the open wait for one) and refuses, with RuntimeError naming
`what` and the path, anything but a regular file, a file that group or others may read or write
(chmod 600), and one over 64 KiB (a secret is short; a wrong path must not be read into memory).
A symbolic link to such a file is followed: secrets mounted by an orchestrator are links.
"""

from __future__ import annotations

import os
import secrets
import stat

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def replace_regular_file(path: str, text: str, what: str = "stats_file",
                         mode: int = 0o644) -> None:
    """Replaces the regular file `path` with `text` (UTF-8) through an O_EXCL|O_NOFOLLOW temporary."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file: "
                         "refusing to replace it")
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.tmp.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)  # Our own temporary: O_EXCL made it.
        except OSError:
            pass
        raise


SECRET_FILE_BYTES_MAX = 64 * 1024


def read_secret_file(path: str, what: str) -> bytes:
    """The stripped bytes of the secret file `path` (see the module's text)."""
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as e:
        raise RuntimeError(f"kvtier: {what} {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RuntimeError(f"kvtier: {what} {path} is {_kind(st.st_mode)}, "
                               "not a regular file")
        if st.st_mode & 0o077:
            raise RuntimeError(f"kvtier: {what} {path} must not be readable by group or "
                               f"others (mode {oct(st.st_mode & 0o777)}; chmod 600 it)")
        if st.st_size > SECRET_FILE_BYTES_MAX:
            raise RuntimeError(f"kvtier: {what} {path} is {st.st_size} bytes, more than a "
                               f"secret file's {SECRET_FILE_BYTES_MAX // 1024} KiB")
        data = b""
        while len(data) <= SECRET_FILE_BYTES_MAX:
            chunk = os.read(fd, SECRET_FILE_BYTES_MAX + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > SECRET_FILE_BYTES_MAX:  # It grew while it was read.
        raise RuntimeError(f"kvtier: {what} {path} is more than a secret file's "
                           f"{SECRET_FILE_BYTES_MAX // 1024} KiB")
    return data.strip()
