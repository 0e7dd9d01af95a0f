"""Shared pieces of the peer benchmarks in bench/peers/: the project virtual environment, loopback
services with a bounded life, statistics and the machine's own limits
(bench/plot.py draws the plots from the scripts' --json reports).

Every peer script calls ensure_venv() first: it creates .venv-peers at the repository root with
the system Python when absent, installs the peer from PyPI by name when it cannot be imported,
and re-runs the script under that environment with kvtier's Python module on PYTHONPATH. Services
(a Redis, a Mooncake master, ...) are started through Service: bound to 127.0.0.1 where the program
allows it, wrapped in coreutils `timeout` so that none outlives --deadline-s even if this script
dies, and stopped by process id when the script ends.

Thread safety: single-threaded scripts; nothing here is shared across threads.
"""

import atexit
import ctypes
import fcntl
import hashlib
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
VENV = REPO / ".venv-peers"
VENV_PYTHON = VENV / "bin" / "python"
SYSTEM_PYTHON = "/usr/bin/python3"
KVTIER_PYTHON_DEFAULT = REPO / "build" / "python"
KVTIER_CLI_DEFAULT = REPO / "build" / "tools" / "cli" / "kvtier"
MODELS_DIR = REPO.parent / "shared" / "models"  # ../shared/models, relative to the repository root


def report_path(path: str) -> str:
    """A path as a report records it: relative to the repository root when it lies inside it, so
    that a report kept in docs/data/ names no machine's directories."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else Path(path).name


KIB = 1024
MIB = 1024 * KIB


def log(msg: str) -> None:
    """Progress goes to stderr so that --json keeps stdout to one JSON object."""
    print(msg, file=sys.stderr, flush=True)


def parse_bytes(text: str) -> int:
    """'256KiB' -> 262144; accepts KiB/MiB/GiB (and K/M/G as the same binary units) or a number."""
    t = text.strip()
    for suffix, mult in (("KiB", KIB), ("MiB", MIB), ("GiB", 1024 * MIB),
                         ("K", KIB), ("M", MIB), ("G", 1024 * MIB)):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(t)


def size_name(n: int) -> str:
    if n % MIB == 0:
        return f"{n // MIB}MiB"
    if n % KIB == 0:
        return f"{n // KIB}KiB"
    return f"{n}B"


# ---------------------------------------------------------------------------------------------
# The virtual environment.

def _venv_has(module: str) -> bool:
    r = subprocess.run([str(VENV_PYTHON), "-c", f"import {module}"], capture_output=True)
    return r.returncode == 0


def _reexec(python: Path, kvtier_python: Path) -> None:
    """Runs this script again under `python`, with `kvtier_python` first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(kvtier_python)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.execve(str(python), [str(python), *sys.argv], env)


def ensure_venv(requirements: list[tuple[str, str]], kvtier_python: Path,
                pip_env: dict[str, str] | None = None, note: str = "") -> None:
    """Makes sure .venv-peers exists and imports every (module, pip spec) of `requirements`
    (installing the missing ones by name from PyPI), then re-executes this script inside it with
    `kvtier_python` first on PYTHONPATH. Returns only when already running inside the venv."""
    kvtier_python = kvtier_python.resolve()
    inside = Path(sys.prefix).resolve() == VENV.resolve()
    if not inside:
        if not VENV_PYTHON.exists():
            log(f"peers: creating {VENV.relative_to(REPO)} with {SYSTEM_PYTHON} -m venv")
            subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(VENV)], check=True)
        for module, spec in requirements:
            if _venv_has(module):
                continue
            log(f"peers: installing {spec} into {VENV.relative_to(REPO)} (pip install {spec})"
                + (f"; {note}" if note else ""))
            env = dict(os.environ, **(pip_env or {}))
            r = subprocess.run([str(VENV_PYTHON), "-m", "pip", "install", spec], env=env)
            if r.returncode != 0 or not _venv_has(module):
                sys.exit(f"peers: could not install {spec} (pip exit {r.returncode}); "
                         f"see pip's output above")
        _reexec(VENV_PYTHON, kvtier_python)
    if str(kvtier_python) not in sys.path:
        sys.path.insert(0, str(kvtier_python))


OVERLAY_RECIPE = 1  # ensure_overlay_venv's recipe; bump it whenever _build_overlay changes.
OVERLAY_STAMP = ".kvtier-overlay"


def venv_cache_dir() -> Path:
    """Where the shared virtual environments are built, one directory per pin set (the same
    directory as scripts/setup_vllm_venv.sh's)."""
    if os.environ.get("KVTIER_VENV_CACHE"):
        return Path(os.environ["KVTIER_VENV_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvtier" / "venvs"


def _purelib(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                               check=True).stdout.strip())


def _overlay_pins(base_venv: Path, packages: list[str]) -> dict:
    """What an overlay environment is built from: its recipe, its packages, and the environment
    it reads (resolved, with the names of its stamp files, which name its pins)."""
    base = base_venv.resolve()
    stamps = sorted(p.name for p in base.glob(".kvtier-*"))
    return {"recipe": OVERLAY_RECIPE, "packages": packages, "base_venv": str(base),
            "base_stamps": stamps}


def _build_overlay(target: Path, base_site: Path, packages: list[str], imports: list[str]) -> None:
    """Builds the overlay environment in `target` (deleted first), stamp not yet written."""
    shutil.rmtree(target, ignore_errors=True)
    log(f"peers: creating {target} with {SYSTEM_PYTHON} -m venv")
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(target)], check=True)
    site = _purelib(target / "bin" / "python")
    if site.parent.name != base_site.parent.name:
        sys.exit(f"peers: {target} and {base_site} have different Pythons "
                 f"({site.parent.name}, {base_site.parent.name})")
    (site / "_peer_base_venv.pth").write_text(str(base_site.resolve()) + "\n")
    log(f"peers: installing {' '.join(packages)} into {target} (pip install --no-deps)")
    python = str(target / "bin" / "python")
    r = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--no-deps", *packages])
    probe = subprocess.run([python, "-c", "; ".join(f"import {m}" for m in imports)],
                           capture_output=True, text=True)
    if r.returncode != 0 or probe.returncode != 0:
        sys.exit(f"peers: could not install {' '.join(packages)} (pip exit "
                 f"{r.returncode}):\n{probe.stderr[-2000:]}")


def _shared_overlay(base_venv: Path, packages: list[str],
                    imports: list[str]) -> tuple[str, Path]:
    """The cached overlay environment for these pins, built first when absent (under an exclusive
    flock on the lock file beside it; the stamp is written last, and a directory without one is
    a build that died, deleted and built again). Returns ("reused" or "built", its path)."""
    pins = _overlay_pins(base_venv, packages)
    digest = hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:12]
    cache = venv_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    # Whoever can write the cache directory can plant an environment this script then runs.
    st = cache.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise SystemExit(f"peers: {cache} is not this user's alone (uid {st.st_uid}, mode "
                         f"{st.st_mode & 0o777:o}): another user could plant an environment there; "
                         "use a directory of your own (KVTIER_VENV_CACHE)")
    target = cache.resolve() / f"{packages[0].replace('==', '-')}-{digest}"
    stamp = target / OVERLAY_STAMP
    if stamp.is_file():
        return "reused", target
    with open(f"{target}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"peers: waiting for another setup building {target}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file():
            return "reused", target
        _build_overlay(target, _purelib(base_venv / "bin" / "python"), packages, imports)
        stamp.write_text(json.dumps(pins, indent=1) + "\n")
    return "built", target


def _link(link: Path, target: Path) -> None:
    """Makes `link` a symlink to `target`; a directory there (an environment of the clone's own,
    from before the environments were shared) is deleted first."""
    if link.is_symlink():
        if Path(os.readlink(link)) == target:
            return
    elif link.exists():
        log(f"peers: deleting {report_path(str(link))}, a directory of its own (the environment "
            f"is now shared)")
        shutil.rmtree(link)
    tmp = link.with_name(f"{link.name}.tmp.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def ensure_overlay_venv(venv: Path, base_venv: Path, packages: list[str], imports: list[str],
                        kvtier_python: Path) -> None:
    """Like ensure_venv, for a peer whose pins clash with the vLLM it must run in: an environment
    of its own (created with the system Python) whose site-packages lists `base_venv`'s
    site-packages after its own (a .pth file), so it runs base_venv's vLLM and torch unchanged;
    `packages` (pip specs) go into it with `pip install --no-deps`, so that pip never replaces
    what base_venv pins, and every module of `imports` must then import. That environment is
    shared by the clones on the machine: built once per pin set (`packages`, base_venv and the
    pins its stamps name, OVERLAY_RECIPE) in venv_cache_dir(), and `venv` is a symlink to it.
    Then this script is re-executed inside `venv` with `kvtier_python` first on PYTHONPATH.
    Returns only when already running inside `venv`."""
    kvtier_python = kvtier_python.resolve()
    if Path(sys.prefix).resolve() != venv.resolve():
        if not (base_venv / "bin" / "python").exists():
            sys.exit(f"peers: no vLLM environment at {base_venv} (scripts/setup_vllm_venv.sh "
                     f"makes one)")
        how, target = _shared_overlay(base_venv, packages, imports)
        _link(venv, target)
        log(f"peers: {how} {report_path(str(venv))} -> {target}")
        _reexec(venv / "bin" / "python", kvtier_python)
    if str(kvtier_python) not in sys.path:
        sys.path.insert(0, str(kvtier_python))


def package_version(dist: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


# ---------------------------------------------------------------------------------------------
# Loopback services with a bounded life.

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Service:
    """One child process (its own session), alive at most `deadline_s` seconds, stopped by pid."""

    _live: list["Service"] = []

    def __init__(self, name: str, argv: list[str], log_path: Path, deadline_s: int,
                 env: dict[str, str] | None = None, cwd: Path | None = None):
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")
        # `timeout` bounds the process even if this script is killed before stopping it.
        full = ["timeout", "--kill-after=5", str(deadline_s), *argv]
        self.proc = subprocess.Popen(full, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                     start_new_session=True)
        Service._live.append(self)

    def wait_ready(self, port: int, timeout_s: float = 20.0) -> None:
        if not wait_port(port, timeout_s, self.proc):
            tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"{self.name} did not listen on 127.0.0.1:{port}:\n{tail}")

    def program_pid(self) -> int | None:
        """The wrapped program's pid (the child of `timeout`)."""
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            return int(kids[0]) if kids else None
        except OSError:
            return None

    def cpu_s(self) -> float:
        """User + system CPU seconds the wrapped program has used so far (all its threads)."""
        pid = self.program_pid()
        return proc_cpu_s(pid) if pid else float("nan")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # `timeout` forwards SIGTERM to its child
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        if self in Service._live:
            Service._live.remove(self)


def proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu_s() -> float:
    """CPU seconds of this process, every thread included."""
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@atexit.register
def _stop_all() -> None:
    for s in list(Service._live):
        s.stop()


def redis_command(port: int, *args: str) -> bytes:
    """One RESP command on a fresh loopback connection; returns the raw reply (first read)."""
    parts = [f"*{len(args)}\r\n".encode()]
    for a in args:
        b = a.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"".join(parts))
        return s.recv(65536)


def start_redis(run_dir: Path, deadline_s: int) -> tuple[Service, int]:
    port = free_port()
    svc = Service("redis-server",
                  ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--protected-mode", "yes",
                   "--dir", str(run_dir)],
                  run_dir / "redis.log", deadline_s)
    svc.wait_ready(port)
    return svc, port


def redis_version() -> str:
    r = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    return r.stdout.strip()


# ---------------------------------------------------------------------------------------------
# Statistics.

def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def percentile(xs: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): with n samples p99 is the largest when n < 100."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


def ratio(a: float, b: float) -> float | None:
    if not b or math.isnan(a) or math.isnan(b):
        return None
    return round(a / b, 3)


def rounded(x, digits: int = 3):
    if isinstance(x, float):
        return None if math.isnan(x) else round(x, digits)
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v, digits) for v in x]
    return x


def dump_json(obj) -> str:
    return json.dumps(rounded(obj), indent=1, sort_keys=False)


# ---------------------------------------------------------------------------------------------
# The machine's own limits, measured in the same run since the machine may be shared.

def memcpy_gbps(size_bytes: int, seconds: float = 0.3) -> float:
    """Single-thread memmove of `size_bytes` between two warm buffers, median of 5 bursts."""
    src = bytearray(os.urandom(size_bytes))
    dst = bytearray(size_bytes)
    ps = ctypes.addressof((ctypes.c_char * size_bytes).from_buffer(src))
    pd = ctypes.addressof((ctypes.c_char * size_bytes).from_buffer(dst))
    ctypes.memmove(pd, ps, size_bytes)
    rates = []
    for _ in range(5):
        n, t0 = 0, time.perf_counter()
        while True:
            ctypes.memmove(pd, ps, size_bytes)
            n += 1
            dt = time.perf_counter() - t0
            if dt >= seconds / 5:
                break
        rates.append(n * size_bytes / dt / 1e9)
    return median(rates)


def direct_read_ms(path: Path, block_bytes: int) -> float:
    """Reads the whole file once with O_DIRECT (no page cache), `block_bytes` per read, one read
    in flight: what the device itself takes to hand over these bytes. NaN where O_DIRECT is
    refused (tmpfs, for one)."""
    import mmap
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return float("nan")
    try:
        buf = mmap.mmap(-1, block_bytes)  # page-aligned, as O_DIRECT needs
        t0 = time.perf_counter()
        offset = 0
        while True:
            n = os.preadv(fd, [buf], offset)
            offset += n
            if n < block_bytes:
                break
        return (time.perf_counter() - t0) * 1e3
    except OSError:
        return float("nan")
    finally:
        os.close(fd)


def _tcp_sink(port_queue, total_bytes: int) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port_queue.put(srv.getsockname()[1])
    conn, _ = srv.accept()
    buf = bytearray(4 * MIB)
    view = memoryview(buf)
    got = 0
    while got < total_bytes:
        n = conn.recv_into(view)
        if n == 0:
            break
        got += n
    conn.sendall(b"k")
    conn.close()
    srv.close()


def loopback_tcp_gbps(total_bytes: int = 256 * MIB, chunk_bytes: int = MIB) -> float:
    """One TCP stream on 127.0.0.1 between two processes: the ceiling of any loopback store that
    moves each value once through the kernel."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_tcp_sink, args=(q, total_bytes), daemon=True)
    p.start()
    port = q.get(timeout=30)
    data = bytes(chunk_bytes)
    with socket.create_connection(("127.0.0.1", port)) as s:
        t0 = time.perf_counter()
        sent = 0
        while sent < total_bytes:
            s.sendall(data)
            sent += chunk_bytes
        s.recv(1)
        dt = time.perf_counter() - t0
    p.join(timeout=10)
    return sent / dt / 1e9
