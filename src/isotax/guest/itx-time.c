/*
 * itx-time: time one command from inside the environment it runs in.
 *
 *   itx-time [-o FILE] [--] CMD [ARGS...]
 *
 * Runs CMD directly (fork + execvp, no shell, so no shell start-up is timed), waits for it
 * with wait4() to get its resource usage, and prints ONE JSON line to stderr, or to FILE with
 * -o (FILE is opened before CMD starts, so a bad path fails fast and CMD's own stderr stays
 * clean):
 *
 *   {"wall_ns":N,"utime_us":N,"stime_us":N,"maxrss_kb":N,"minflt":N,"majflt":N,
 *    "nvcsw":N,"nivcsw":N,"exit":N,"signal":N}
 *
 * wall_ns is CLOCK_MONOTONIC around fork..wait (not affected by clock steps; inside a VM it is
 * the guest's clock, which is the point: the host's view includes the environment's exec path).
 * exit is CMD's exit status, or 128+signal if a signal killed it (the shell's convention);
 * signal is the killing signal or 0. itx-time exits with the same `exit` value, so callers can
 * treat it like CMD. Its own failures: 125 (usage, -o file), 126 (CMD not executable),
 * 127 (CMD not found), like env(1) and timeout(1).
 *
 * Static and dependency-free on purpose: the same binary runs natively, in containers and VMs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long tv_us(struct timeval tv) {
    return (long long)tv.tv_sec * 1000000LL + tv.tv_usec;
}

static void usage(void) {
    fprintf(stderr, "usage: itx-time [-o FILE] [--] CMD [ARGS...]\n");
}

int main(int argc, char **argv) {
    const char *outpath = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) { i++; break; }
        if (strcmp(argv[i], "-o") == 0) {
            if (i + 1 >= argc) { usage(); return 125; }
            outpath = argv[++i];
            continue;
        }
        if (argv[i][0] == '-') { usage(); return 125; }
        break;  /* first non-option: the command */
    }
    if (i >= argc) { usage(); return 125; }
    char **cmd = &argv[i];

    int outfd = STDERR_FILENO;
    if (outpath) {
        outfd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (outfd < 0) {
            fprintf(stderr, "itx-time: cannot open %s: %s\n", outpath, strerror(errno));
            return 125;
        }
    }

    /* Like time(1): an interactive ^C goes to CMD; we stay to report how it ended. */
    struct sigaction ign = {0}, old_int, old_quit;
    ign.sa_handler = SIG_IGN;
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);

    int64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "itx-time: fork: %s\n", strerror(errno));
        return 125;
    }
    if (pid == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGQUIT, &old_quit, NULL);
        execvp(cmd[0], cmd);
        int e = errno;
        fprintf(stderr, "itx-time: %s: %s\n", cmd[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }

    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &status, 0, &ru) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "itx-time: wait4: %s\n", strerror(errno));
            return 125;
        }
    }
    int64_t wall = now_ns() - t0;

    int code = 0, sig = 0;
    if (WIFEXITED(status)) {
        code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        sig = WTERMSIG(status);
        code = 128 + sig;
    }

    char line[512];
    int n = snprintf(line, sizeof line,
                     "{\"wall_ns\":%lld,\"utime_us\":%lld,\"stime_us\":%lld,\"maxrss_kb\":%ld,"
                     "\"minflt\":%ld,\"majflt\":%ld,\"nvcsw\":%ld,\"nivcsw\":%ld,"
                     "\"exit\":%d,\"signal\":%d}\n",
                     (long long)wall, tv_us(ru.ru_utime), tv_us(ru.ru_stime), ru.ru_maxrss,
                     ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw, ru.ru_nivcsw, code, sig);
    /* One write() so the line is never interleaved with CMD's own stderr output. */
    if (write(outfd, line, (size_t)n) != n) {
        fprintf(stderr, "itx-time: writing the result: %s\n", strerror(errno));
        return 125;
    }
    if (outpath) close(outfd);
    return code;
}
