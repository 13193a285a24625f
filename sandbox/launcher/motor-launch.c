/*
 * motor-launch: what a root worker does between fork and exec of bwrap, as a program of its own,
 * so the worker can start it with vfork instead of copying its whole address space.
 *
 *   motor-launch UID GID N SOURCE1 TARGET1 ... SOURCEn TARGETn -- /path/to/bwrap ARGS...
 *
 * In order: a private mount namespace (unshare CLONE_NEWNS, / made recursively private, so
 * nothing below reaches the host's mount table), each SOURCE bind-mounted (recursively) onto
 * its TARGET, the supplementary groups dropped, gid then uid switched for good (real, effective
 * and saved) to GID/UID, then the program after "--" executed with this argv and environment.
 * Any failure prints "motor-launch: <step>: <reason>" on stderr and exits 127 (2 for a bad
 * command line) before anything is executed: nothing ever runs with root's rights or unbound.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

static void fail(const char *step, const char *detail) {
    int err = errno;
    fprintf(stderr, "motor-launch: %s%s%s: %s\n", step, detail ? " " : "", detail ? detail : "",
            strerror(err));
    _exit(127);
}

static void usage(const char *why) {
    fprintf(stderr,
            "motor-launch: %s\nusage: motor-launch UID GID N SOURCE1 TARGET1 ... -- PROGRAM "
            "ARGS...\n",
            why);
    _exit(2);
}

/* A decimal number in [lo, hi], or usage() naming `what`. */
static unsigned long number(const char *text, unsigned long lo, unsigned long hi,
                            const char *what) {
    char *end;
    if (text[0] < '0' || text[0] > '9') usage(what);
    errno = 0;
    unsigned long value = strtoul(text, &end, 10);
    if (errno || *end || value < lo || value > hi) usage(what);
    return value;
}

int main(int argc, char **argv) {
    if (argc < 6) usage("too few arguments");
    /* never root, nor the "unchanged" id -1 of the set*id calls */
    uid_t uid = (uid_t)number(argv[1], 1, 4294967294UL, "UID must be a number from 1");
    gid_t gid = (gid_t)number(argv[2], 1, 4294967294UL, "GID must be a number from 1");
    unsigned long n = number(argv[3], 0, 64, "N must be a number of binds from 0 to 64");
    int sep = 4 + 2 * (int)n;
    if (sep >= argc || strcmp(argv[sep], "--") != 0)
        usage("expected N SOURCE TARGET pairs, then --");
    if (sep + 1 >= argc || argv[sep + 1][0] != '/')
        usage("the program after -- must be an absolute path");
    for (int i = 4; i < sep; i++)
        if (argv[i][0] != '/') usage("bind sources and targets must be absolute paths");

    if (unshare(CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWNS)", NULL);
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail("make / private", NULL);
    for (int i = 4; i < sep; i += 2) {
        if (mount(argv[i], argv[i + 1], NULL, MS_BIND | MS_REC, NULL) != 0) {
            char detail[8192];
            snprintf(detail, sizeof detail, "%s onto %s", argv[i], argv[i + 1]);
            fail("bind", detail);
        }
    }
    if (setgroups(0, NULL) != 0) fail("setgroups([])", NULL);
    if (setresgid(gid, gid, gid) != 0) fail("setresgid", argv[2]);
    if (setresuid(uid, uid, uid) != 0) fail("setresuid", argv[1]);
    /* a dropped uid that could be taken back would be no drop at all */
    if (setresuid(0, 0, 0) == 0 || geteuid() != uid || getegid() != gid) {
        errno = EPERM;
        fail("drop to the sandbox uid", argv[1]);
    }
    execv(argv[sep + 1], argv + sep + 1);
    fail("exec", argv[sep + 1]);
    return 127;
}
