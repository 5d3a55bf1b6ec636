/*
 * The node runtime's launcher: one static program, hard-linked under every name in the runtime's bin/
 * (cdictk, cdictk-hook, cdictk-runtime, ...). Why it exists and what it runs: cdictk/noderuntime/__init__.py.
 *
 * It reads /proc/self/exe, which the kernel has already resolved through every symlink (P/current ->
 * versions/ID): ROOT, the version's directory, is the parent of the directory holding it, so a launcher
 * started while P/current is swapped uses one version throughout. NAME is the name it was run by (a
 * hard link keeps its own name there). It then execs the runtime's own dynamic loader on the
 * interpreter, so that nothing of the node's C library, loader or ld.so.cache is used:
 *
 *   ROOT/lib/LOADER --library-path ROOT/lib --inhibit-cache --argv0 ROOT/bin/python3 ROOT/libexec/python3 ARGS
 *
 * ARGS: the launcher's own arguments for NAME python3; else -I -S ROOT/libexec/NAME.py and its arguments.
 * LD_PRELOAD and LD_AUDIT name libraries built for the node's C library, not the runtime's: they are
 * dropped. Any failure is one line on stderr and exit status 127, as a shell says of a missing program.
 *
 * Built by `python -m cdictk.noderuntime launcher` (gcc -static -Os); never kept as a binary in the
 * repository.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#define LOADER "ld-linux-x86-64.so.2"
#elif defined(__aarch64__)
#define LOADER "ld-linux-aarch64.so.1"
#else
#error "no glibc loader name known for this architecture"
#endif

#define PROG "cdictk-launcher"
#define INTERPRETER_NAME "python3"
#define EXTRA 10 /* the loader's options, the interpreter's flags, its script and the final NULL */

static int fail(const char *what, const char *detail) {
    dprintf(2, PROG ": %s: %s\n", what, detail);
    return 127;
}

static char *joined(const char *root, const char *middle, const char *last) {
    size_t length = strlen(root) + strlen(middle) + strlen(last) + 1;
    char *path = malloc(length);
    if (path != NULL) {
        snprintf(path, length, "%s%s%s", root, middle, last);
    }
    return path;
}

int main(int argc, char **argv) {
    static char exe[PATH_MAX];
    ssize_t length = readlink("/proc/self/exe", exe, sizeof exe);
    if (length < 0) {
        return fail("/proc/self/exe", strerror(errno));
    }
    if ((size_t)length >= sizeof exe) {
        return fail("/proc/self/exe", "path too long");
    }
    exe[length] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL) {
        return fail(exe, "not an absolute path");
    }
    *slash = '\0';
    const char *name = slash + 1;
    slash = strrchr(exe, '/');
    if (slash == NULL || strcmp(slash + 1, "bin") != 0) {
        return fail(exe, "the launcher is not in the runtime's bin directory");
    }
    *slash = '\0';
    const char *root = exe; /* "" when bin/ is at the top: the paths below are then absolute still */
    /* The loader splits its library path at these; a root holding one cannot be named there. */
    if (strpbrk(root, ":;") != NULL) {
        return fail(root, "the runtime's directory holds ':' or ';', which the loader's library path cannot");
    }
    char *loader = joined(root, "/lib/", LOADER);
    char *library_path = joined(root, "/lib", "");
    char *argv0 = joined(root, "/bin/", INTERPRETER_NAME);
    char *interpreter = joined(root, "/libexec/", INTERPRETER_NAME);
    char *script = joined(root, "/libexec/", name);
    char **args = calloc((size_t)argc + EXTRA, sizeof *args);
    if (!loader || !library_path || !argv0 || !interpreter || !script || !args) {
        return fail(name, "out of memory");
    }
    size_t at = 0;
    args[at++] = loader;
    args[at++] = "--library-path";
    args[at++] = library_path;
    args[at++] = "--inhibit-cache";
    args[at++] = "--argv0";
    args[at++] = argv0;
    args[at++] = interpreter;
    if (strcmp(name, INTERPRETER_NAME) != 0) {
        char *entry = joined(script, ".py", "");
        if (entry == NULL) {
            return fail(name, "out of memory");
        }
        if (access(entry, R_OK) != 0) {
            return fail(entry, strerror(errno));
        }
        args[at++] = "-I";
        args[at++] = "-S";
        args[at++] = entry;
    }
    for (int i = 1; i < argc; i++) {
        args[at++] = argv[i];
    }
    args[at] = NULL;
    unsetenv("LD_PRELOAD");
    unsetenv("LD_AUDIT");
    execv(loader, args);
    return fail(loader, strerror(errno));
}
