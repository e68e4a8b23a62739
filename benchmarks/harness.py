"""What every benchmark script needs around its measurements: the children's environment, a
warm page cache, a guard against foreign load, and a record of the machine and the package
versions. Standard library only at import, so a child that times its own imports can load it
first.

The load guard: the machine is shared, and a run that another process slowed down measures
that process, not the engine. ``run_guarded`` starts a child and accounts for every CPU second
the machine spent while it ran (``/proc/stat``): what the child and its threads used (its
rusage from ``wait4``), what this parent used, and the rest, the *foreign* CPU time. A run
whose foreign time exceeds ``LoadPolicy.max_foreign_cores`` cores on average is
"foreign-loaded"; ``with_retries`` repeats it (a bounded number of times, after a pause) and
keeps the discarded attempts for the record.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYCACHE = HERE / "data" / "pycache"


#: What a zarrsql child imports before its clock starts: the libraries and zarrsql modules its
#: first query loads. `import zarrsql` is lazy and `connect()` defers the scan machinery to the
#: first statement that reads a store, so without this list that statement's time would hold
#: the imports (about 0.1 s), which every other engine pays before its clock (DuckDB's import
#: is excluded from the Parquet column the same way).
ZARRSQL_IMPORTS = [
    "numpy", "pyarrow", "numcodecs", "zstandard", "duckdb",
    "zarrsql", "zarrsql.engine.api", "zarrsql.engine.connection", "zarrsql.engine.answers",
    "zarrsql.engine.filters", "zarrsql.engine.hints", "zarrsql.engine.joins", "zarrsql.engine.mounts",
    "zarrsql.engine.params", "zarrsql.engine.source", "zarrsql.scan", "zarrsql.scan.reader",
    "zarrsql.expand.arrow", "zarrsql.store.refsets",
    # a first query with an aggregate also loads the GROUP BY the scan computes
    "zarrsql.engine.grouped", "zarrsql.scan.aggregate",
]  # fmt: skip


def child_env() -> dict:
    """The children's environment: bytecode caching on, in a cache of our own.

    Some environments set PYTHONDONTWRITEBYTECODE=1; an editable install (zarrsql from
    src/) would then recompile its sources in every process and count that as import
    time. The cache goes to benchmarks/data/pycache, never into src/.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def warm(paths) -> None:
    """Read every file below `paths` once, so that all engines start from the same warm page cache."""
    for root in paths:
        root = Path(root)
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for f in files:
            with open(f, "rb") as fh:
                while fh.read(1 << 23):
                    pass


def versions(names) -> dict:
    """Installed version of each distribution in `names` (None when absent)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def machine_info() -> dict:
    info = {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "cpu_count": os.cpu_count(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
        info["cpu_count_physical"] = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001
        pass
    try:
        info["zarrsql_git"] = (
            subprocess.run(
                ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or None
        )
    except Exception:  # noqa: BLE001
        info["zarrsql_git"] = None
    return info


# --------------------------------------------------------------------------- load guard
@dataclass(frozen=True)
class LoadPolicy:
    """When a run counts as taken under foreign load, and what to do about it.

    ``max_foreign_cores``: foreign CPU seconds per wall second above which a run is
    foreign-loaded (0.25: a quarter of one core, on a 2-core machine one eighth of it).
    ``min_foreign_s``: foreign time below this never counts (``/proc/stat`` ticks are 10 ms,
    and kernel threads always run a little). ``retries``: attempts after the first before the
    last one is kept anyway, marked loaded. ``pause_s``: wait before a retry, and at most
    ``quiet_wait_s`` before every run for a quiet quarter second.
    """

    max_foreign_cores: float = 0.25
    min_foreign_s: float = 0.05
    retries: int = 3
    pause_s: float = 2.0
    quiet_wait_s: float = 5.0
    enabled: bool = True


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_busy_s() -> float | None:
    """Seconds of CPU time the whole machine has spent busy since boot, over all CPUs:
    user + nice + system + irq + softirq + steal of /proc/stat's "cpu" line. Steal counts:
    time a hypervisor gave our virtual CPUs to someone else slows a run like any other
    process. None where /proc/stat does not exist."""
    try:
        with open("/proc/stat") as fh:
            f = fh.readline().split()
    except OSError:
        return None
    if not f or f[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f[1:9])
    return (user + nice + system + irq + softirq + steal) / _CLK_TCK


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def foreign_cores_now(window_s: float = 0.25) -> float | None:
    """Cores busy with other processes over the next ``window_s`` seconds (this one idle)."""
    b0, s0, t0 = cpu_busy_s(), _self_cpu_s(), time.perf_counter()
    if b0 is None:
        return None
    time.sleep(window_s)
    b1, s1, t1 = cpu_busy_s(), _self_cpu_s(), time.perf_counter()
    return max(0.0, (b1 - b0) - (s1 - s0)) / (t1 - t0)


def wait_for_quiet(policy: LoadPolicy) -> float | None:
    """Wait (at most ``policy.quiet_wait_s``) until other processes use less than
    ``policy.max_foreign_cores``; returns the last foreign load sampled."""
    if not policy.enabled:
        return None
    deadline = time.perf_counter() + policy.quiet_wait_s
    while True:
        f = foreign_cores_now()
        if f is None or f <= policy.max_foreign_cores or time.perf_counter() >= deadline:
            return f
        time.sleep(0.25)


@dataclass(frozen=True)
class GuardedRun:
    """One child process and the CPU accounting of the machine while it ran."""

    returncode: int | str
    wall_s: float
    child_cpu_s: float
    foreign_cpu_s: float | None
    foreign_cores: float | None
    loadavg_before: tuple[float, float, float]
    loadavg_after: tuple[float, float, float]
    foreign_loaded: bool

    def record(self) -> dict:
        d = asdict(self)
        d["loadavg_before"], d["loadavg_after"] = list(self.loadavg_before), list(self.loadavg_after)
        return d


def is_foreign_loaded(foreign_cpu_s: float | None, wall_s: float, policy: LoadPolicy) -> bool:
    if foreign_cpu_s is None or not policy.enabled:
        return False
    return foreign_cpu_s > max(policy.min_foreign_s, policy.max_foreign_cores * wall_s)


def run_guarded(cmd, *, timeout: float, policy: LoadPolicy = LoadPolicy(), **popen_kw) -> GuardedRun:
    """Run ``cmd`` to completion (killed after ``timeout`` s) and account for the CPU time
    the machine spent meanwhile: foreign = all busy time - the child's (with its waited-for
    children) - this process's. ``popen_kw`` goes to ``subprocess.Popen`` (stdout, env, cwd)."""
    la0 = os.getloadavg()
    b0, s0 = cpu_busy_s(), _self_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, **popen_kw)
    killed = threading.Event()

    def kill():
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    finally:
        timer.cancel()
    wall = time.perf_counter() - t0
    b1, s1 = cpu_busy_s(), _self_cpu_s()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    child = ru.ru_utime + ru.ru_stime
    foreign = None if b0 is None or b1 is None else max(0.0, (b1 - b0) - child - (s1 - s0))
    return GuardedRun(
        returncode="timeout" if killed.is_set() else proc.returncode,
        wall_s=wall,
        child_cpu_s=child,
        foreign_cpu_s=foreign,
        foreign_cores=None if foreign is None else foreign / wall,
        loadavg_before=la0,
        loadavg_after=os.getloadavg(),
        foreign_loaded=is_foreign_loaded(foreign, wall, policy),
    )


def with_retries(attempt, policy: LoadPolicy, log=None) -> tuple[dict, list[dict]]:
    """Call ``attempt()`` (one run: a dict with a ``"load"`` record from ``run_guarded``)
    until a run is not foreign-loaded, at most ``1 + policy.retries`` times. Returns the
    kept run and the discarded ones. When every attempt was loaded the last is kept, with
    ``load["kept_although_loaded"]`` set, so a cell is never silently empty."""
    discarded: list[dict] = []
    while True:
        wait_for_quiet(policy)
        rec = attempt()
        load = rec.setdefault("load", {})
        load["attempt"] = len(discarded) + 1
        if not load.get("foreign_loaded") or len(discarded) >= policy.retries:
            load["kept_although_loaded"] = bool(load.get("foreign_loaded"))
            return rec, discarded
        discarded.append(rec)
        if log is not None:
            log(
                f"    foreign load {load.get('foreign_cores', 0):.2f} cores: run discarded, retrying "
                f"({len(discarded)}/{policy.retries})"
            )
        time.sleep(policy.pause_s)


def load_summary(kept: list[dict], discarded: list[dict], policy: LoadPolicy) -> dict:
    """The load guard's part of a results JSON: the policy and what it did."""
    loads = [r.get("load", {}) for r in kept]
    fc = [x["foreign_cores"] for x in loads if x.get("foreign_cores") is not None]
    return {
        "policy": asdict(policy),
        "runs_kept": len(kept),
        "runs_discarded": len(discarded),
        "kept_although_loaded": sum(1 for x in loads if x.get("kept_although_loaded")),
        "max_foreign_cores_kept": max(fc) if fc else None,
        "median_foreign_cores_kept": sorted(fc)[len(fc) // 2] if fc else None,
        "method": "foreign CPU = busy time of /proc/stat (user+nice+system+irq+softirq+steal) during "
        "the child's life - the child's rusage (wait4, its threads and waited-for children) - "
        "the harness's own; foreign-loaded when it exceeds max(min_foreign_s, "
        "max_foreign_cores x wall)",
    }


def add_load_arguments(ap) -> None:
    """The load guard's command-line options, the same in every benchmark script."""
    ap.add_argument(
        "--max-foreign-load",
        type=float,
        default=LoadPolicy.max_foreign_cores,
        help="cores of foreign CPU use above which a run is discarded and repeated (default %(default)s)",
    )
    ap.add_argument(
        "--load-retries",
        type=int,
        default=None,
        help=f"repeats of a foreign-loaded run before it is kept, marked (default {LoadPolicy.retries}; "
        "1 with --quick)",
    )
    ap.add_argument("--no-load-guard", action="store_true", help="record the load but never discard or repeat a run")


def policy_from_args(a, *, quick: bool = False) -> LoadPolicy:
    """The policy of ``add_load_arguments``' options. A quick (smoke) run retries once and
    waits at most a second for quiet, so it ends in minutes even on a busy machine."""
    retries = a.load_retries if a.load_retries is not None else (1 if quick else LoadPolicy.retries)
    return LoadPolicy(
        max_foreign_cores=a.max_foreign_load,
        retries=max(0, retries),
        quiet_wait_s=1.0 if quick else LoadPolicy.quiet_wait_s,
        enabled=not a.no_load_guard,
    )


# --------------------------------------------------------------------------- disk and page cache
def _files(paths):
    for root in paths:
        root = Path(root)
        yield from ([root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()))


def resident_fraction(paths) -> float | None:
    """Fraction of the bytes of every file below ``paths`` that sit in the page cache now,
    from mincore(2) over a read-only mapping of each file (nothing is read). None where
    mincore is not available."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = os.sysconf("SC_PAGE_SIZE")
    prot_read, map_shared, map_failed = 1, 1, ctypes.c_void_p(-1).value
    total = resident = 0
    for f in _files(paths):
        size = f.stat().st_size
        if size == 0:
            continue
        pages = -(-size // page)
        fd = os.open(f, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, prot_read, map_shared, fd, 0)
            if addr in (None, map_failed):
                return None
            try:
                vec = (ctypes.c_ubyte * pages)()
                if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                    return None
                resident += (pages - bytes(vec).count(0)) * page  # bit 0: resident
            finally:
                libc.munmap(ctypes.c_void_p(addr), size)
        finally:
            os.close(fd)
        total += pages * page
    return resident / total if total else None


def evict(paths) -> None:
    """Ask the kernel to drop these files' pages from the page cache (posix_fadvise
    DONTNEED: only our own files, nothing global). Used for cold-cache runs."""
    for f in _files(paths):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_info(path) -> dict:
    """The device and filesystem holding ``path`` (from /proc/mounts and /sys/block): what
    a reader needs to judge cold-cache numbers."""
    path = Path(path).resolve()
    best = None
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        mounts = []
    for line in mounts:
        dev, mnt, fstype = line.split()[:3]
        if (str(path) + "/").startswith(mnt.rstrip("/") + "/") and (best is None or len(mnt) > len(best[1])):
            best = (dev, mnt, fstype)
    info: dict = {"path": str(path)}
    if best:
        dev, mnt, fstype = best
        info.update(device=dev, mount=mnt, fstype=fstype)
        name = Path(dev).name
        for block in (name, name.rstrip("0123456789")):
            rot = Path("/sys/block") / block / "queue" / "rotational"
            if rot.is_file():
                info["rotational"] = rot.read_text().strip() == "1"
                model = Path("/sys/block") / block / "device" / "model"
                if model.is_file():
                    info["model"] = model.read_text().strip()
                break
    try:
        st = os.statvfs(path)
        info["free_gb"] = round(st.f_bavail * st.f_frsize / 2**30, 1)
    except OSError:
        pass
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        meminfo = []
    for line in meminfo:
        k, v = line.split(":", 1)
        if k in ("MemTotal", "MemAvailable", "Cached"):
            info[f"{k.lower()}_gb"] = round(int(v.split()[0]) / 2**20, 1)
    return info
