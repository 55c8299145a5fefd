"""Linux confinement primitives for the sandbox zygote (``_zygote.py``): namespaces, a private root, rlimits,
capabilities and a seccomp filter. Standard library only (``ctypes``), because the zygote must start without
importing ``hf_grpo`` (torch, transformers) and Python 3.11 has no ``os.unshare``.

Two steps, see docs/sandbox.md for what each one contains:

* :func:`enter_zygote_namespaces` -- once per zygote: new user, mount, network, IPC and UTS namespaces, and a
  read-only root that holds only the system libraries and the Python installation (``pivot_root``; the old root,
  with the trainer's files, is detached). As root the mount work is done with real root's rights (the Python install
  may sit under ``/root``, mode 0700) and the zygote then drops to an unprivileged uid before creating its user
  namespace, so RLIMIT_NPROC (which never applies to uid 0) holds. Without root the user namespace comes first, as
  ``unshare -Ur`` does. A failure at any point raises: the caller falls back to rlimits only.
* per program (``_zygote.program``): fresh tmpfs ``/sandbox`` and ``/tmp`` (own mount and IPC namespaces, pid 1 of
  its own pid namespace so everything it starts dies with it), rlimits, no capabilities, no new privileges, seccomp;
  in the rlimits fallback, :func:`landlock_confine` instead of the private root and namespaces.

Departure from bubblewrap/nsjail (which do the same with a setuid or standalone binary): everything is done from
Python via libc, so nothing beyond the kernel has to be installed. seccomp uses libseccomp through ctypes when the
library is present (it is on Debian/Ubuntu); without it the filter is skipped and reported.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 36, 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
_CAP_LAST = 63  # PR_CAPBSET_DROP of an unknown capability fails with EINVAL, which we ignore

# Directories bound read-only into the new root when they exist (merged-/usr symlinks are recreated as symlinks).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
PACKAGES_DIR = "/opt/hf-grpo-packages"  # in the private root: the allowed third-party packages, on programs' sys.path

_libc = ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _call(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _call(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount({source!r} -> {target!r}, {fstype})",
    )


def prctl(option: int, arg: int) -> None:
    _call(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl({option})")


def _syscall(table: dict[str, int], what: str, *args) -> None:
    number = table.get(platform.machine())
    if number is None:
        raise OSError(0, f"{what}: syscall number unknown on {platform.machine()}")
    _call(_libc.syscall(ctypes.c_long(number), *args), what)


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _map_to_root(uid: int, gid: int) -> None:
    """Inside a fresh user namespace: become its uid/gid 0, mapped to our own ids outside (all an unprivileged
    process may map)."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1\n")
    _write("/proc/self/gid_map", f"0 {gid} 1\n")


def _bind(source: str, target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    # A read-only remount must keep the flags the kernel locked on the source (nosuid, nodev, noexec) or it fails.
    locked = os.statvfs(target).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | locked)


def _build_root(new_root: str, python_dirs: list[str], packages: dict[str, str]) -> None:
    mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            os.symlink(os.readlink(path), new_root + path)
        elif os.path.isdir(path):
            _bind(path, new_root + path, True)
    for path in python_dirs:  # the interpreter's prefix, when it is not under /usr
        if not any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS) and os.path.isdir(path):
            _bind(path, new_root + path, True)
    for path in SYSTEM_FILES + DEVICES:
        if os.path.exists(path):
            _bind(path, new_root + path, False)
    # What a Linux /dev also has: the standard streams by name (through the run's own /proc) and a mount point for
    # the run's /dev/shm (POSIX semaphores and shared memory: multiprocessing's locks, pools and queues need it).
    for name, target in (("fd", "fd"), ("stdin", "fd/0"), ("stdout", "fd/1"), ("stderr", "fd/2")):
        os.symlink(f"/proc/self/{target}", f"{new_root}/dev/{name}")
    os.makedirs(new_root + "/dev/shm")
    for name, source in packages.items():  # allowed third-party packages (numpy), each alone, read-only
        _bind(source, f"{new_root}{PACKAGES_DIR}/{name}", True)
    for path in ("/sandbox", "/tmp"):  # mount points for the per-program tmpfs
        os.makedirs(new_root + path, exist_ok=True)
    # The host's /proc, for the zygote only: it needs /proc/self to map its user namespace (as root that comes after
    # pivot_root), and the kernel lets a namespace mount a new proc only where a full one is visible. Each program
    # gets its own pid namespace's proc mounted over it, and no capability to unmount that.
    os.makedirs(new_root + "/proc")
    mount("/proc", new_root + "/proc", None, MS_BIND | MS_REC)
    mount(None, new_root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(new_root)
    _syscall(_SYS_PIVOT_ROOT, "pivot_root", b".", b".")  # new root stacked on the old one ...
    _call(_libc.umount2(b".", ctypes.c_int(MNT_DETACH)), "umount old root")  # ... which is then detached
    os.chdir("/")


def enter_zygote_namespaces(new_root: str, python_dirs: list[str], sandbox_uid: int, packages: dict[str, str]) -> None:
    """Move the calling (single-threaded) process into its own namespaces and private read-only root.

    ``new_root`` is an empty directory to mount the root on. ``sandbox_uid`` is the unprivileged uid (and gid) a
    root caller drops to. ``packages`` maps directory names to host directories bound read-only under
    ``PACKAGES_DIR`` (and only those: the rest of site-packages stays out). Raises OSError if the kernel refuses any
    step.
    """
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    if os.geteuid() == 0:
        unshare(flags)
        _call(_libc.sethostname(b"sandbox", ctypes.c_size_t(7)), "sethostname")  # do not show the host's name
        mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount may propagate back to the host
        _build_root(new_root, python_dirs, packages)
        os.setgroups([])
        os.setresgid(sandbox_uid, sandbox_uid, sandbox_uid)
        os.setresuid(sandbox_uid, sandbox_uid, sandbox_uid)
        prctl(PR_SET_DUMPABLE, 1)  # a uid change made us non-dumpable, which leaves /proc/self owned by root
        unshare(CLONE_NEWUSER)  # owns the per-program mount/pid namespaces created later
        _map_to_root(sandbox_uid, sandbox_uid)
    else:
        uid, gid = os.geteuid(), os.getegid()
        unshare(CLONE_NEWUSER)
        _map_to_root(uid, gid)
        unshare(flags)
        _call(_libc.sethostname(b"sandbox", ctypes.c_size_t(7)), "sethostname")
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        _build_root(new_root, python_dirs, packages)


def drop_root(sandbox_uid: int) -> None:
    """Fallback mode as root: run as an unprivileged uid so the process limit applies and root files are closed."""
    os.setgroups([])
    os.setresgid(sandbox_uid, sandbox_uid, sandbox_uid)
    os.setresuid(sandbox_uid, sandbox_uid, sandbox_uid)


def kill_all_children() -> None:
    """Kill and reap every child, including orphans reparented to us as a child subreaper, until none is left.

    The rlimits-only fallback's substitute for a pid namespace dying with its init."""
    children_file = f"/proc/self/task/{os.getpid()}/children"
    while True:
        try:
            with open(children_file) as handle:
                pids = [int(p) for p in handle.read().split()]
        except OSError:  # no /proc or no CONFIG_PROC_CHILDREN: reaping below still waits for them
            pids = []
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def drop_bounding_set() -> None:
    """Empty the capability bounding set: no later exec (of a setuid binary, or as uid 0) regains a capability."""
    for cap in range(_CAP_LAST + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError:
            pass


def mount_private_tmp(target: str, size_mb: int) -> None:
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size_mb}m,mode=0700")


def mount_private_proc() -> None:
    """A proc for the caller's (new) pid namespace over the zygote's host /proc: the program sees only itself."""
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def drop_capabilities() -> None:
    """capset(): empty effective, permitted and inheritable sets (version 3 header, two 32-bit data words)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    _syscall(_SYS_CAPSET, "capset", header, data)


def set_limits(cpu_s: int, memory_mb: int, max_processes: int | None, file_mb: int, open_files: int) -> None:
    limits = [
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_AS, memory_mb << 20),
        (resource.RLIMIT_FSIZE, file_mb << 20),
        (resource.RLIMIT_NOFILE, open_files),
        (resource.RLIMIT_CORE, 0),
    ]
    if max_processes is not None:
        limits.append((resource.RLIMIT_NPROC, max_processes))
    for which, value in limits:
        resource.setrlimit(which, (value, value))


# ---- seccomp (libseccomp via ctypes) -----------------------------------------------------------------------------
# Denied with EPERM: kernel attack surface a test program never needs (namespaces, mounts, ptrace, BPF, keys,
# modules, clock changes) and, outside AF_UNIX, sockets. clone3 answers ENOSYS so libc falls back to clone, whose
# namespace flags can be checked (clone3 passes them in memory, out of a filter's reach); this is what Docker does.
DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "io_uring_setup",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "quotactl",
    "syslog",
    "vhangup",
    "lookup_dcookie",
    "mbind",
    "move_pages",
    "personality",
    # Another process's descriptors or their identity: pidfd_getfd would copy a pipe or socket end out
    # of a same-uid process (rlimits mode), kcmp compares open files across processes.
    "pidfd_getfd",
    "kcmp",
)
# Denied too where a run has no IPC namespace of its own (rlimits mode): SysV shared memory, semaphores and message
# queues and POSIX message queues outlive the process that created them, so they would carry state from one run to
# the next (and, created by a killed run, outlive the trainer). With namespaces each run gets a fresh IPC namespace.
IPC_SYSCALLS = (
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
)
_SCMP_ACT_ALLOW, _SCMP_ACT_ERRNO = 0x7FFF0000, 0x00050000
_SCMP_CMP_NE, _SCMP_CMP_MASKED_EQ = 1, 7
_AF_UNIX = 1


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _load_libseccomp():
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


_seccomp = _load_libseccomp()


def install_seccomp(allow_unix_sockets: bool, deny_ipc: bool = False) -> None:
    """Load the deny-list filter (requires no_new_privs); ``deny_ipc`` adds ``IPC_SYSCALLS``. Raises OSError when
    libseccomp is missing or refuses."""
    if _seccomp is None:
        raise OSError(0, "libseccomp.so.2 not found")
    ctx = _seccomp.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError(0, "seccomp_init failed")
    try:

        def rule(name: str, errno_value: int, *cmps: _ArgCmp) -> None:
            number = _seccomp.seccomp_syscall_resolve_name(name.encode())
            if number < 0:
                return  # not a syscall on this architecture
            array = (_ArgCmp * len(cmps))(*cmps) if cmps else None
            result = _seccomp.seccomp_rule_add_array(ctx, _SCMP_ACT_ERRNO | errno_value, number, len(cmps), array)
            if result != 0:  # libseccomp returns -errno
                raise OSError(-result, f"seccomp rule for {name}: {os.strerror(-result)}")

        for name in DENIED_SYSCALLS + (IPC_SYSCALLS if deny_ipc else ()):
            rule(name, 1)  # EPERM
        rule("clone3", 38)  # ENOSYS
        rule("clone", 1, _ArgCmp(0, _SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER))
        for flag in (CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET):
            rule("clone", 1, _ArgCmp(0, _SCMP_CMP_MASKED_EQ, flag, flag))
        if allow_unix_sockets:
            rule("socket", 1, _ArgCmp(0, _SCMP_CMP_NE, _AF_UNIX, 0))
        else:
            rule("socket", 1)
        result = _seccomp.seccomp_load(ctx)
        if result != 0:
            raise OSError(-result, f"seccomp_load: {os.strerror(-result)}")
    finally:
        _seccomp.seccomp_release(ctx)


# ---- Landlock (the rlimits fallback's file system, signal and abstract-socket fence) -------------------------------
# Without namespaces a program shares the host's file system, /proc and uid with the trainer's other processes.
# Landlock (Linux >= 5.13, unprivileged) confines it anyway: read-only access to the system and Python directories,
# read-write access to its own working directory, nothing else (no /tmp or /dev/shm to leave state in for the next
# run, no /proc/<pid>/{fd,mem} of the trainer); from ABI 6 on, no signals to and no abstract unix sockets of processes
# outside its domain (the trainer, the zygote, other runs). The syscall numbers are the same on x86_64 and aarch64.
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | (1 << 14) | (1 << 15)  # + truncate, ioctl_dev
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
WRITABLE_DEVICES = ("/dev/null", "/dev/full")


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is unavailable."""
    version = _libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return max(0, version)


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: execute .. make_sym
    for version, bit in ((2, 13), (3, 14), (5, 15)):  # refer, truncate, ioctl_dev
        if abi >= version:
            rights |= 1 << bit
    return rights


def landlock_confine(read_only: list[str], read_write: list[str]) -> None:
    """Restrict the calling process (and what it starts) to reading ``read_only`` and everything in ``read_write``,
    plus the devices programs need. Requires no_new_privs. Raises OSError when Landlock is unavailable."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(0, "Landlock is not available")
    handled = _fs_rights(abi)
    attr = (ctypes.c_uint64 * 3)(
        handled,
        _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
        _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0,
    )
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET), attr, ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        rules = [(p, _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR) for p in read_only]
        rules += [(p, _FS_READ_FILE | _FS_WRITE_FILE) for p in WRITABLE_DEVICES]
        rules += [(p, handled) for p in read_write]
        for path, allowed in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # absent here: nothing to allow
            try:
                if not os.path.isdir(path):
                    allowed &= _FS_FILE_RIGHTS
                rule = _PathBeneath(allowed & handled, fd)
                _call(
                    _libc.syscall(
                        ctypes.c_long(_SYS_LANDLOCK_ADD_RULE),
                        ctypes.c_int(ruleset),
                        ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    ),
                    f"landlock_add_rule({path})",
                )
            finally:
                os.close(fd)
        _call(
            _libc.syscall(ctypes.c_long(_SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)
