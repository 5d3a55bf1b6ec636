/* PID 1 of a fake node's namespaces (tests/e2e/noderoot.py), as a booted node's init is.
 *
 *   node-init OLD-ROOT HOSTNAME
 *
 * Started in new mount, PID, network and UTS namespaces with its working directory at the node's root
 * (a mount point) and OLD-ROOT an empty directory there. It makes that root the mount namespace's own
 * with pivot_root(2), as a booted node has it: under a chroot, runc exec would join a container's mount
 * namespace at the namespace's old root, not at the container's. It detaches the old root, makes every
 * mount shared (as systemd does at boot: containerd wants the source of a HostToContainer or
 * Bidirectional mount shared or a slave), names the node, brings up its loopback, writes "ready" on
 * stdout, and then reaps what is handed to it (the shims' orphans) until SIGTERM or SIGINT. Its death
 * ends the node: the kernel kills every process left in its PID namespace. Static: the node may have
 * no C library of its own. */
#define _GNU_SOURCE
#include <errno.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig)
{
    (void)sig;
    _exit(0);
}

static void reap(int sig)
{
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = saved;
}

static int fail(const char *what)
{
    dprintf(2, "node-init: %s: %s\n", what, strerror(errno));
    return 1;
}

static int loopback_up(void)
{
    struct ifreq request;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&request, 0, sizeof request);
    strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
    int status = ioctl(fd, SIOCGIFFLAGS, &request);
    if (status == 0) {
        request.ifr_flags |= IFF_UP;
        status = ioctl(fd, SIOCSIFFLAGS, &request);
    }
    close(fd);
    return status;
}

int main(int argc, char **argv)
{
    char old_root[4096];
    if (argc != 3 || strchr(argv[1], '/') != NULL) {
        dprintf(2, "usage: node-init OLD-ROOT HOSTNAME (OLD-ROOT: a directory in the working directory)\n");
        return 2;
    }
    if (syscall(SYS_pivot_root, ".", argv[1]) != 0)
        return fail("pivot_root");
    if (chdir("/") != 0)
        return fail("chdir /");
    snprintf(old_root, sizeof old_root, "/%s", argv[1]);
    if (umount2(old_root, MNT_DETACH) != 0)
        return fail("umount the old root");
    if (rmdir(old_root) != 0)
        return fail("rmdir the old root");
    if (mount(NULL, "/", NULL, MS_REC | MS_SHARED, NULL) != 0)
        return fail("make / shared");
    if (sethostname(argv[2], strlen(argv[2])) != 0)
        return fail("sethostname");
    if (loopback_up() != 0)
        return fail("bring lo up");
    signal(SIGINT, quit);
    signal(SIGTERM, quit);
    signal(SIGCHLD, reap);
    if (write(1, "ready\n", 6) != 6)
        return fail("write ready");
    close(1);
    for (;;)
        pause();
}
