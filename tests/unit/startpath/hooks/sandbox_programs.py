"""Programs and libraries the ldconfig sandbox tests build with gcc, once per test session.

Stub shared libraries with real SONAMEs for ldconfig to index, and small static programs that stand in
for ldconfig: one that reports what it sees from inside the sandbox, and misbehaving ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import REPO

PROBE_C = r"""
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
extern char **environ;
/* argv[1]: report file (a path inside the sandbox); argv[2...]: paths to try to open. */
int main(int argc, char **argv) {
    FILE *out = fopen(argv[1], "w");
    if (!out) return 10;
    int n = 0;
    for (char **e = environ; *e; e++) n++;
    char cwd[4096];
    fprintf(out, "pid %d\nenv %d\ncwd %s\nfds", (int)getpid(), n, getcwd(cwd, sizeof cwd) ? cwd : "?");
    for (int fd = 0; fd < 1024; fd++)
        if (fd != fileno(out) && fcntl(fd, F_GETFD) >= 0) fprintf(out, " %d", fd);
    fprintf(out, "\n");
    for (int fd = 0; fd < 2; fd++) {
        struct stat st;
        fstat(fd, &st);
        fprintf(out, "std%d %d:%d\n", fd, S_ISCHR(st.st_mode) ? (int)major(st.st_rdev) : -1,
                S_ISCHR(st.st_mode) ? (int)minor(st.st_rdev) : -1);
    }
    int limits[] = {RLIMIT_CPU, RLIMIT_AS, RLIMIT_NOFILE, RLIMIT_FSIZE, RLIMIT_CORE};
    const char *names[] = {"CPU", "AS", "NOFILE", "FSIZE", "CORE"};
    for (int i = 0; i < 5; i++) {
        struct rlimit rl;
        getrlimit(limits[i], &rl);
        fprintf(out, "limit %s %llu\n", names[i], (unsigned long long)rl.rlim_cur);
    }
    fprintf(out, "no_new_privs %d\n", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
    char host[256] = "";
    gethostname(host, sizeof host);
    fprintf(out, "hostname %s\n", host);
    /* argv[2] in the caller's IPC namespace names a message queue id that must not exist in here. */
    fprintf(out, "queue %d\n", msgget((key_t)0x0cd1c7, 0) >= 0 ? 0 : errno);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53), .sin_addr.s_addr = htonl(0x0a000001)};
    fprintf(out, "connect %d\n", connect(s, (struct sockaddr *)&a, sizeof a) == 0 ? 0 : errno);
    for (int i = 2; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY | O_NONBLOCK | O_NOCTTY);
        fprintf(out, "open %s %d\n", argv[i], fd >= 0 ? 0 : errno);
        if (fd >= 0) close(fd);
    }
    return fclose(out) == 0 ? 0 : 11;
}
"""

# Fake ldconfigs, one behaviour each (update_ldcache's argv is fixed, so the behaviour is compiled in).
FAKE_C = r"""
#include <unistd.h>
int main(void) {
#if MODE == 1
    sleep(60);
    return 0;
#elif MODE == 2
    static const char said[] = "ldconfig: a warning\nldconfig: cannot write the cache\n";
    write(2, said, sizeof said - 1);
    return 3;
#else
    *(volatile int *)0 = 1; /* a fault is delivered even to the init of a PID namespace */
    return 0;
#endif
}
"""

STUB_C = "int cdictk_stub(void) { return 1; }\n"
STUBS = {
    "libfoo.so.1.2.3": "libfoo.so.1",
    "libdrv.so.550.54": "libdrv.so.1",
    "libevil.so.1.0": "libevil.so.1",
}


class Programs:
    """Paths of what was built; all root-owned, mode 0755."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.probe = base / "probe"
        self.sleeper = base / "sleeper"
        self.exit3 = base / "exit3"
        self.segfault = base / "segfault"
        self.dynamic = base / "dynamic"
        self.libs = {name: base / name for name in STUBS}


# The host's ldconfig as a static ELF file: Ubuntu's /sbin/ldconfig is a shell script that execs this.
HOST_LDCONFIG = "/sbin/ldconfig.real" if os.path.exists("/sbin/ldconfig.real") else "/sbin/ldconfig"

_built: list[Programs] = []


def require_tools() -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (tests/setup-host.sh installs it); it builds the stub libraries")
    if not os.path.exists(HOST_LDCONFIG):
        pytest.skip(f"the host has no {HOST_LDCONFIG}")


def programs(factory: pytest.TempPathFactory) -> Programs:
    """Everything built, once per session."""
    require_tools()
    if _built:
        return _built[0]
    built = Programs(factory.mktemp("sandbox-programs"))
    src = built.base / "src"
    src.mkdir()
    (src / "probe.c").write_text(PROBE_C)
    (src / "fake.c").write_text(FAKE_C)
    (src / "stub.c").write_text(STUB_C)
    jobs = [
        ["gcc", "-static", "-O1", "-o", built.probe, src / "probe.c"],
        ["gcc", "-static", "-O1", "-DMODE=1", "-o", built.sleeper, src / "fake.c"],
        ["gcc", "-static", "-O1", "-DMODE=2", "-o", built.exit3, src / "fake.c"],
        ["gcc", "-static", "-O1", "-DMODE=3", "-o", built.segfault, src / "fake.c"],
        ["gcc", "-O1", "-DMODE=2", "-o", built.dynamic, src / "fake.c"],
    ] + [
        ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", built.libs[name], src / "stub.c"]
        for name, soname in STUBS.items()
    ]
    running = [subprocess.Popen([str(arg) for arg in job], stderr=subprocess.PIPE) for job in jobs]
    for job, proc in zip(jobs, running, strict=True):
        _, err = proc.communicate()
        if proc.returncode != 0:
            if "-static" in job:
                pytest.skip(f"gcc -static failed (is libc6-dev installed?): {err.decode(errors='replace')}")
            raise AssertionError(f"{job} failed: {err.decode(errors='replace')}")
    for path in [built.probe, built.sleeper, built.exit3, built.segfault, built.dynamic]:
        path.chmod(0o755)
    _built.append(built)
    return built


def run_isolated(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` in a private mount namespace, so the mounts it makes vanish with it."""
    repo = str(REPO)
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=repo,
        env={"PYTHONPATH": repo, "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (
        f"isolated run failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    )
    return result


def mountinfo() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return f.read().splitlines()
