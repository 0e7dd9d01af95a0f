#!/usr/bin/env python3
"""Checks the project's rule that no function is longer than 80 lines outside tests and fuzz
harnesses: every C, C++, CUDA and Python source of the repository is read by lizard (pinned in
the tools virtual environment that scripts/install_deps.sh creates), and each function whose
length (lizard's "length": its first line to its last, comments and blank lines included) is
over the limit is named, one per line, with its file and first line; the exit status is then 1.

    function_length_check.py --root SOURCE_DIR --tools-venv VENV [--limit 80]

The sources are the files git knows in SOURCE_DIR (tracked, or untracked and not ignored), or,
outside a git checkout, every file under it but hidden and build directories. This script runs
under any python3 and re-executes itself under VENV's interpreter, where lizard is installed.
Without that environment (or lizard in it) it exits 77, which CTest reports as skipped, or 1
under KVTIER_REQUIRE_RESOURCES=1 (CI), where a check that silently vanished would let the rule
go unchecked.
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path, PurePosixPath

SKIP = 77  # The test's SKIP_RETURN_CODE.
EXTENSIONS = {".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh", ".py"}

# What the rule does not cover, and why. Tests may spell out one long scenario, and fuzz
# harnesses are generated-input drivers; neither is project code that others call. Generated
# tables are data, not logic: the repository has none today; list one here by path if one is
# added.
TEST_DIRS = {"tests", "fuzz"}  # Directories of these names, at any depth.
TEST_FILE_SUFFIXES = ("_test.cc",)  # GoogleTest files beside the code they test.
TEST_FILE_PREFIXES = ("test_",)  # pytest's test_*.py.
GENERATED_TABLES: set[str] = set()


def excluded(path: str) -> bool:
    p = PurePosixPath(path)
    if TEST_DIRS & set(p.parts[:-1]) or path in GENERATED_TABLES:
        return True
    return p.name.endswith(TEST_FILE_SUFFIXES) or (
        p.suffix == ".py" and p.name.startswith(TEST_FILE_PREFIXES))


def source_files(root: Path) -> list[str]:
    """The repository's files, relative to root, POSIX-style."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], check=True, capture_output=True).stdout
        files = [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(root):
            # Hidden directories (.git, the virtual environments) and build directories.
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and
                           not (Path(dirpath) / d / "CMakeCache.txt").exists()]
            rel = Path(dirpath).relative_to(root)
            files += [(rel / f).as_posix() for f in filenames]
    return sorted(f for f in set(files)
                  if PurePosixPath(f).suffix in EXTENSIONS and (root / f).is_file())


def missing(why: str) -> int:
    if os.environ.get("KVTIER_REQUIRE_RESOURCES") == "1":
        print(f"function_length_check: {why}, and KVTIER_REQUIRE_RESOURCES=1 makes a missing "
              "lizard a failure (run scripts/install_deps.sh)")
        return 1
    print(f"function_length_check: SKIPPED: {why} (run scripts/install_deps.sh)")
    return SKIP


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--tools-venv", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=80)
    args = parser.parse_args()
    venv = args.tools_venv.resolve()
    if Path(sys.prefix).resolve() != venv:
        python = venv / "bin" / "python"
        if not python.is_file():
            return missing(f"no tools virtual environment at {venv}")
        os.execv(python, [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])
    try:
        import lizard
    except ImportError:
        return missing(f"lizard is not installed in {venv}")

    root = args.root.resolve()
    files = [f for f in source_files(root) if not excluded(f)]
    long = []
    for f in files:
        for fn in lizard.analyze_file(str(root / f)).function_list:
            if fn.length > args.limit:
                long.append(f"{f}:{fn.start_line}: {fn.name} is {fn.length} lines")
    print(f"function_length_check: lizard {lizard.version}, {len(files)} files, "
          f"limit {args.limit} lines")
    if long:
        print(f"{len(long)} functions are longer than {args.limit} lines; split them into "
              "named helpers:")
        print("\n".join(long))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
