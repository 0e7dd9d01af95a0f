"""kvtier.files.replace_regular_file, the writer of the vLLM connector's stats_file: it replaces a
regular file through an O_EXCL|O_NOFOLLOW temporary with an unpredictable name, so a link planted
at the old fixed name ("<path>.tmp<pid>") or anywhere else is never followed, and it refuses a
target that is a FIFO, a device node, a directory or a link, leaving it as it was. Method: real
files under pytest's tmp_path; the device node is made with os.mknod (root), never /dev/null
itself, so that a regression cannot replace the machine's /dev/null."""

import os
import stat

import pytest

from kvtier.files import replace_regular_file


def test_writes_and_replaces(tmp_path):
    path = tmp_path / "stats.json"
    replace_regular_file(str(path), "one")
    replace_regular_file(str(path), "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json"]  # No temporary left.


def test_planted_temporary_link_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("data")
    path = tmp_path / "stats.json"
    for planted in (f"{path}.tmp", f"{path}.tmp{os.getpid()}"):
        os.symlink(victim, planted)
    replace_regular_file(str(path), "{}")
    assert path.read_text() == "{}"
    assert victim.read_text() == "data"
    assert os.path.islink(f"{path}.tmp{os.getpid()}")


@pytest.mark.parametrize("kind", ["fifo", "directory", "link", "device"])
def test_refuses_what_is_not_a_regular_file(tmp_path, kind):
    victim = tmp_path / "victim"
    victim.write_text("data")
    target = tmp_path / "target"
    if kind == "fifo":
        os.mkfifo(target)
        check, name = stat.S_ISFIFO, "a FIFO"
    elif kind == "directory":
        target.mkdir()
        check, name = stat.S_ISDIR, "a directory"
    elif kind == "link":
        os.symlink(victim, target)
        check, name = stat.S_ISLNK, "a symbolic link"
    else:
        try:
            os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # What /dev/null is.
        except PermissionError:
            os.mkfifo(target)  # Without CAP_MKNOD the FIFO case stands in for it.
        check = stat.S_ISCHR if stat.S_ISCHR(os.lstat(target).st_mode) else stat.S_ISFIFO
        name = "a character device" if check is stat.S_ISCHR else "a FIFO"
    with pytest.raises(ValueError, match=f"stats_file {target} is {name}, not a regular file"):
        replace_regular_file(str(target), "{}")
    assert check(os.lstat(target).st_mode)
    assert victim.read_text() == "data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target", "victim"]
