/* The pod sandbox's process, as registry.k8s.io/pause runs it: sleep until SIGTERM or SIGINT, and
 * reap whatever is handed to it (it is PID 1 of the pod's namespaces). Static: the image holds this file
 * alone. */
#include <signal.h>
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
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

int main(void)
{
    signal(SIGINT, quit);
    signal(SIGTERM, quit);
    signal(SIGCHLD, reap);
    for (;;)
        pause();
}
