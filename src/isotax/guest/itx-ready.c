/*
 * itx-ready: the "environment is up" marker, and a minimal PID 1 for containers.
 *
 *   itx-ready [--kmsg] [--hold]
 *
 * Prints `ITX-READY <CLOCK_MONOTONIC ns>` on stdout (flushed at once) so the host can time
 * start-up up to the first instruction of user code. With --kmsg the same line also goes to
 * /dev/kmsg when that is writable (a VM's console shows it next to the kernel's own
 * timestamps); it is opt-in because on the host it would write into the host's kernel log.
 *
 * With --hold it then stays alive as a container's init, so workloads can be started with
 * `runc exec`: it reaps every orphan that is re-parented to it (it is PID 1 there, and zombies
 * would otherwise pile up), and exits 0 on SIGTERM, SIGINT or SIGHUP. The signals are blocked
 * and taken with sigwaitinfo(), and also given (empty) handlers, because PID 1 of a PID
 * namespace only receives signals it has asked for.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nothing(int sig) { (void)sig; }

static void reap_all(void) {
    /* Several children may have exited behind one SIGCHLD: reap until none is left. */
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    int hold = 0, kmsg = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--hold") == 0) hold = 1;
        else if (strcmp(argv[i], "--kmsg") == 0) kmsg = 1;
        else {
            fprintf(stderr, "usage: itx-ready [--kmsg] [--hold]\n");
            return 2;
        }
    }

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGCHLD);
    if (hold) {
        /* Block before announcing readiness: a SIGTERM sent right after the marker is kept. */
        struct sigaction sa = {0};
        sa.sa_handler = nothing;
        for (int s = 1; s < NSIG; s++)
            if (sigismember(&set, s)) sigaction(s, &sa, NULL);
        sigprocmask(SIG_BLOCK, &set, NULL);
    }

    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[64];
    int n = snprintf(line, sizeof line, "ITX-READY %lld\n",
                     (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (write(STDOUT_FILENO, line, (size_t)n) != n && !hold) return 1;
    if (kmsg) {
        int fd = open("/dev/kmsg", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            if (write(fd, line, (size_t)n) < 0) { /* best effort: the stdout line counts */ }
            close(fd);
        }
    }
    if (!hold) return 0;

    for (;;) {
        siginfo_t si;
        int s = sigwaitinfo(&set, &si);
        if (s < 0) {
            if (errno == EINTR) continue;
            return 1;
        }
        if (s == SIGCHLD) {
            reap_all();
            continue;
        }
        reap_all();
        return 0;  /* SIGTERM / SIGINT / SIGHUP: a clean stop */
    }
}
