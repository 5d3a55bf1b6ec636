/*
 * A stand-in for libnvidia-ml.so so that tests exercise the real pynvml code
 * path on machines without an NVIDIA GPU.  Only the calls cdictk makes are
 * provided, and the few more nvidia-ctk's generator needs for full GPUs (for
 * bench/compare_generate.py); anything else fails to resolve, which pynvml reports as
 * NVMLError_FunctionNotFound, so a new dependency on NVML shows up in tests
 * instead of silently returning made-up data.
 *
 * The devices come from a text file, fake-nvml.conf, read at every first
 * nvmlInit (see fake_read_config for its format).  It sits next to the library
 * file itself, so every test can build its own library + config pair in a
 * temporary directory and several can coexist in one process.
 *
 * Not thread-safe: tests drive NVML from one thread, and keeping locks out
 * keeps the build to a plain "gcc -shared" without -pthread.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Values from nvml.h; callers compare against them numerically. */
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_UNKNOWN 999

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

#define FAKE_MAX_GPUS 32
#define FAKE_MAX_MIGS 7
#define FAKE_STR_SIZE 96     /* NVML_DEVICE_UUID_V2_BUFFER_SIZE and _NAME_V2_ */
#define FAKE_DRIVER_SIZE 80  /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
#define FAKE_LINE_SIZE 1024
#define FAKE_MAX_TOKENS 16
#define FAKE_KEY_SIZE 16
#define FAKE_CONFIG_NAME "fake-nvml.conf"
#define FAKE_DEFAULT_PCI_ID 0x233010DEu /* H100 SXM5 80GB */
/* What an H100 reports: compute capability 9.0 and, like every data-center
 * GPU since Ampere (and the T4 on current drivers), "Product Brand: NVIDIA". */
#define FAKE_DEFAULT_ARCH_MAJOR 9
#define FAKE_DEFAULT_ARCH_MINOR 0
#define NVML_BRAND_NVIDIA 14

typedef int nvmlReturn_t;

/* Layout must match pynvml's nvmlPciInfo_t byte for byte. */
typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* Layout must match pynvml's c_nvmlDeviceAttributes. */
typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

enum fake_mig_mode { FAKE_MIG_DISABLED, FAKE_MIG_ENABLED, FAKE_MIG_UNSUPPORTED };

/* One type for GPUs and MIG devices because NVML hands out both as the same
 * opaque nvmlDevice_t and lets most queries take either. */
struct fake_device {
    int used;
    int is_mig;
    int lost; /* "GPU is lost" from nvmlDeviceGetHandleByIndex, as after an Xid 79 */
    unsigned int gpu; /* own index for a GPU, parent index for a MIG device */
    char uuid[FAKE_STR_SIZE];
    char name[FAKE_STR_SIZE];
    /* GPU only */
    unsigned int minor;
    unsigned int domain, bus, dev, pci_id;
    enum fake_mig_mode mig_mode;
    unsigned int max_mig;
    int arch_major, arch_minor; /* nvmlDeviceGetCudaComputeCapability */
    int brand;                  /* nvmlBrandType_t, any value: NVML adds brands */
    /* MIG only */
    unsigned int gi, ci, gi_slices, ci_slices, sms;
    unsigned long long memory_mb;
};

struct fake_state {
    int have_driver;
    char driver[FAKE_DRIVER_SIZE];
    int cuda;
    int init_error;
    int init_hang; /* nvmlInit never returns, as with a driver stuck in the kernel */
    unsigned int gpu_count;
    struct fake_device gpus[FAKE_MAX_GPUS];
    struct fake_device migs[FAKE_MAX_GPUS][FAKE_MAX_MIGS];
};

typedef struct fake_device *nvmlDevice_t;

/* Static, not heap: handles stay valid pointers for the life of the process,
 * so a stale handle used after shutdown is rejected rather than dereferenced
 * as freed memory. */
static struct fake_state live;
static struct fake_state staged;
static unsigned int init_refs;

nvmlReturn_t nvmlInit_v2(void);

/* ---- configuration ------------------------------------------------------ */

struct fake_token {
    char key[FAKE_KEY_SIZE];
    char value[FAKE_STR_SIZE];
    int seen;
};

struct fake_line {
    const char *path;
    unsigned int lineno;
    char kind[FAKE_KEY_SIZE];
    struct fake_token tokens[FAKE_MAX_TOKENS];
    unsigned int ntokens;
};

static int fake_bad(const struct fake_line *l, const char *what, const char *detail)
{
    /* stderr because a test that only sees NVML_ERROR_UNKNOWN could not tell
     * a typo in its config from a bug in the code under test. */
    if (l->lineno > 0)
        fprintf(stderr, "fake-nvml: %s:%u: %s%s%s\n", l->path, l->lineno, what, detail ? ": " : "",
                detail ? detail : "");
    else
        fprintf(stderr, "fake-nvml: %s: %s%s%s\n", l->path, what, detail ? ": " : "", detail ? detail : "");
    return -1;
}

static int fake_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static int fake_is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Splits "kind key=value key="quoted value" # comment" into l->kind and
 * l->tokens.  Returns 1 for a record, 0 for a blank/comment line, -1 on error. */
static int fake_tokenize(const char *s, struct fake_line *l)
{
    size_t n;

    l->ntokens = 0;
    while (fake_is_space(*s))
        s++;
    if (*s == '\0' || *s == '#')
        return 0;

    for (n = 0; fake_is_word(s[n]); n++)
        ;
    if (n == 0 || n >= FAKE_KEY_SIZE || !(fake_is_space(s[n]) || s[n] == '\0'))
        return fake_bad(l, "expected a record kind at the start of the line", NULL);
    memcpy(l->kind, s, n);
    l->kind[n] = '\0';
    s += n;

    for (;;) {
        struct fake_token *t;
        const char *v;

        while (fake_is_space(*s))
            s++;
        if (*s == '\0' || *s == '#')
            return 1;
        if (l->ntokens == FAKE_MAX_TOKENS)
            return fake_bad(l, "too many key=value pairs", NULL);
        t = &l->tokens[l->ntokens];

        for (n = 0; fake_is_word(s[n]); n++)
            ;
        if (n == 0 || n >= FAKE_KEY_SIZE || s[n] != '=')
            return fake_bad(l, "expected key=value", s);
        memcpy(t->key, s, n);
        t->key[n] = '\0';
        s += n + 1;

        if (*s == '"') {
            v = ++s;
            while (*s != '"' && *s != '\0')
                s++;
            if (*s != '"')
                return fake_bad(l, "unterminated quote for", t->key);
            n = (size_t)(s - v);
            s++;
        } else {
            v = s;
            while (!fake_is_space(*s) && *s != '\0' && *s != '"')
                s++;
            n = (size_t)(s - v);
            if (n == 0 || *s == '"')
                return fake_bad(l, "bad value for", t->key);
        }
        if (!(fake_is_space(*s) || *s == '\0'))
            return fake_bad(l, "expected a space after the value of", t->key);
        if (n >= FAKE_STR_SIZE)
            return fake_bad(l, "value too long for", t->key);
        memcpy(t->value, v, n);
        t->value[n] = '\0';
        t->seen = 0;

        for (unsigned int i = 0; i < l->ntokens; i++)
            if (strcmp(l->tokens[i].key, t->key) == 0)
                return fake_bad(l, "duplicate key", t->key);
        l->ntokens++;
    }
}

/* Marks the key as consumed so fake_check_all_seen can reject typos. */
static const char *fake_get(struct fake_line *l, const char *key)
{
    for (unsigned int i = 0; i < l->ntokens; i++) {
        if (strcmp(l->tokens[i].key, key) == 0) {
            l->tokens[i].seen = 1;
            return l->tokens[i].value;
        }
    }
    return NULL;
}

static int fake_check_all_seen(const struct fake_line *l)
{
    for (unsigned int i = 0; i < l->ntokens; i++)
        if (!l->tokens[i].seen)
            return fake_bad(l, "unknown key", l->tokens[i].key);
    return 0;
}

static int fake_parse_num(const char *s, unsigned long long max, unsigned long long *out)
{
    char *end;
    unsigned long long v;

    /* strtoull accepts "-1" and wraps it; NVML values are never negative. */
    if (s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 0);
    if (errno != 0 || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

static int fake_num(struct fake_line *l, const char *key, int required, unsigned long long dflt,
                    unsigned long long max, unsigned long long *out)
{
    const char *s = fake_get(l, key);

    if (s == NULL) {
        if (required)
            return fake_bad(l, "missing key", key);
        *out = dflt;
        return 0;
    }
    if (fake_parse_num(s, max, out) != 0)
        return fake_bad(l, "bad number for", key);
    return 0;
}

static int fake_uint(struct fake_line *l, const char *key, int required, unsigned int dflt,
                     unsigned int max, unsigned int *out)
{
    unsigned long long v;

    if (fake_num(l, key, required, dflt, max, &v) != 0)
        return -1;
    *out = (unsigned int)v;
    return 0;
}

static int fake_str(struct fake_line *l, const char *key, char *out, size_t size)
{
    const char *s = fake_get(l, key);
    size_t n;

    if (s == NULL)
        return fake_bad(l, "missing key", key);
    n = strlen(s);
    if (n >= size)
        return fake_bad(l, "value too long for", key);
    memcpy(out, s, n + 1);
    return 0;
}

static int fake_hex_field(const char **p, unsigned int maxdigits, char stop, unsigned int *out)
{
    unsigned int v = 0, n = 0;
    const char *s = *p;

    for (; *s != stop; s++, n++) {
        unsigned int d;

        if (*s >= '0' && *s <= '9')
            d = (unsigned int)(*s - '0');
        else if (*s >= 'a' && *s <= 'f')
            d = (unsigned int)(*s - 'a' + 10);
        else if (*s >= 'A' && *s <= 'F')
            d = (unsigned int)(*s - 'A' + 10);
        else
            return -1;
        if (n == maxdigits)
            return -1;
        v = v * 16 + d;
    }
    if (n == 0)
        return -1;
    *p = s + (stop != '\0');
    *out = v;
    return 0;
}

/* Accepts both the 8-digit and the legacy 4-digit domain form, as sysfs and
 * nvidia-smi print either; the function number must be 0 as for every GPU. */
static int fake_parse_bus(const char *s, struct fake_device *d)
{
    unsigned int fn;

    if (fake_hex_field(&s, 8, ':', &d->domain) != 0 || fake_hex_field(&s, 2, ':', &d->bus) != 0 ||
        fake_hex_field(&s, 2, '.', &d->dev) != 0 || fake_hex_field(&s, 1, '\0', &fn) != 0)
        return -1;
    return (d->dev <= 0x1f && fn == 0) ? 0 : -1;
}

static int fake_record_driver(struct fake_line *l, struct fake_state *st)
{
    unsigned long long cuda;

    if (st->have_driver)
        return fake_bad(l, "more than one driver record", NULL);
    if (fake_str(l, "version", st->driver, sizeof st->driver) != 0 ||
        fake_num(l, "cuda", 1, 0, INT_MAX, &cuda) != 0)
        return -1;
    st->cuda = (int)cuda;
    st->have_driver = 1;
    return fake_check_all_seen(l);
}

static int fake_record_init(struct fake_line *l, struct fake_state *st)
{
    unsigned long long code, hang;

    if (fake_num(l, "error", 0, 0, INT_MAX, &code) != 0 || fake_num(l, "hang", 0, 0, 1, &hang) != 0)
        return -1;
    st->init_error = (int)code;
    st->init_hang = (int)hang;
    return fake_check_all_seen(l);
}

/* "9.0": a compute capability, two decimal numbers below 100. */
static int fake_parse_arch(const char *s, int *major, int *minor)
{
    int n[2] = {0, 0};

    for (int i = 0; i < 2; i++) {
        int digits = 0;

        for (; *s >= '0' && *s <= '9'; s++, digits++) {
            if (digits == 2)
                return -1;
            n[i] = n[i] * 10 + (*s - '0');
        }
        if (digits == 0 || *s != (i == 0 ? '.' : '\0'))
            return -1;
        s++;
    }
    *major = n[0];
    *minor = n[1];
    return 0;
}

static int fake_record_gpu(struct fake_line *l, struct fake_state *st)
{
    unsigned int index, brand, lost;
    struct fake_device *d;
    const char *mig, *bus, *arch;

    if (fake_uint(l, "index", 1, 0, FAKE_MAX_GPUS - 1, &index) != 0)
        return -1;
    d = &st->gpus[index];
    if (d->used)
        return fake_bad(l, "duplicate gpu index", fake_get(l, "index"));
    d->gpu = index;
    if (fake_uint(l, "minor", 1, 0, UINT_MAX, &d->minor) != 0 ||
        fake_str(l, "uuid", d->uuid, sizeof d->uuid) != 0 ||
        fake_str(l, "name", d->name, sizeof d->name) != 0 ||
        fake_uint(l, "maxmig", 0, FAKE_MAX_MIGS, FAKE_MAX_MIGS, &d->max_mig) != 0 ||
        fake_uint(l, "pciid", 0, FAKE_DEFAULT_PCI_ID, UINT_MAX, &d->pci_id) != 0 ||
        fake_uint(l, "brand", 0, NVML_BRAND_NVIDIA, INT_MAX, &brand) != 0 ||
        fake_uint(l, "lost", 0, 0, 1, &lost) != 0)
        return -1;
    d->brand = (int)brand;
    d->lost = (int)lost;

    arch = fake_get(l, "arch");
    d->arch_major = FAKE_DEFAULT_ARCH_MAJOR;
    d->arch_minor = FAKE_DEFAULT_ARCH_MINOR;
    if (arch != NULL && fake_parse_arch(arch, &d->arch_major, &d->arch_minor) != 0)
        return fake_bad(l, "bad compute capability (want major.minor)", arch);

    bus = fake_get(l, "bus");
    if (bus == NULL)
        return fake_bad(l, "missing key", "bus");
    if (fake_parse_bus(bus, d) != 0)
        return fake_bad(l, "bad PCI bus id (want DDDDDDDD:BB:DD.0)", bus);

    mig = fake_get(l, "mig");
    if (mig == NULL || strcmp(mig, "disabled") == 0)
        d->mig_mode = FAKE_MIG_DISABLED;
    else if (strcmp(mig, "enabled") == 0)
        d->mig_mode = FAKE_MIG_ENABLED;
    else if (strcmp(mig, "unsupported") == 0)
        d->mig_mode = FAKE_MIG_UNSUPPORTED;
    else
        return fake_bad(l, "mig must be disabled, enabled or unsupported", mig);

    d->used = 1;
    return fake_check_all_seen(l);
}

static int fake_record_mig(struct fake_line *l, struct fake_state *st)
{
    unsigned int gpu, index;
    struct fake_device *d;

    if (fake_uint(l, "gpu", 1, 0, FAKE_MAX_GPUS - 1, &gpu) != 0 ||
        fake_uint(l, "index", 1, 0, FAKE_MAX_MIGS - 1, &index) != 0)
        return -1;
    d = &st->migs[gpu][index];
    if (d->used)
        return fake_bad(l, "duplicate mig device", NULL);
    d->is_mig = 1;
    d->gpu = gpu;
    if (fake_uint(l, "gi", 1, 0, UINT_MAX, &d->gi) != 0 ||
        fake_uint(l, "ci", 1, 0, UINT_MAX, &d->ci) != 0 ||
        fake_str(l, "uuid", d->uuid, sizeof d->uuid) != 0 ||
        fake_str(l, "name", d->name, sizeof d->name) != 0 ||
        fake_uint(l, "gislices", 1, 0, UINT_MAX, &d->gi_slices) != 0 ||
        fake_uint(l, "cislices", 1, 0, UINT_MAX, &d->ci_slices) != 0 ||
        fake_num(l, "memmb", 1, 0, ULLONG_MAX, &d->memory_mb) != 0 ||
        fake_uint(l, "sms", 0, 14, UINT_MAX, &d->sms) != 0)
        return -1;
    d->used = 1;
    return fake_check_all_seen(l);
}

/* Cross-record rules, checked once the whole file is in, so records may come
 * in any order. */
static int fake_validate(struct fake_line *l, struct fake_state *st)
{
    unsigned int g, m;

    l->lineno = 0;
    if (!st->have_driver)
        return fake_bad(l, "no driver record", NULL);
    for (g = 0; g < FAKE_MAX_GPUS && st->gpus[g].used; g++)
        ;
    st->gpu_count = g;
    for (; g < FAKE_MAX_GPUS; g++)
        if (st->gpus[g].used)
            return fake_bad(l, "gpu indices must be 0..n-1 without gaps", NULL);
    for (g = 0; g < FAKE_MAX_GPUS; g++) {
        for (m = 0; m < FAKE_MAX_MIGS; m++) {
            if (!st->migs[g][m].used)
                continue;
            if (g >= st->gpu_count)
                return fake_bad(l, "mig device on a gpu that is not defined", st->migs[g][m].uuid);
            if (st->gpus[g].mig_mode != FAKE_MIG_ENABLED)
                return fake_bad(l, "mig device on a gpu without mig=enabled", st->migs[g][m].uuid);
            if (m >= st->gpus[g].max_mig)
                return fake_bad(l, "mig index not below the gpu's maxmig", st->migs[g][m].uuid);
        }
    }
    return 0;
}

/* Reads one line without its newline.  Returns 1 for a line, 0 at end of
 * file, -1 when it does not fit, -2 for an embedded NUL (which would
 * otherwise cut the line short without anyone noticing). */
static int fake_read_line(FILE *f, char *buf, size_t size)
{
    size_t n = 0;
    int c;

    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\0')
            return -2;
        if (n + 1 >= size)
            return -1;
        buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return (c == EOF && n == 0) ? 0 : 1;
}

/*
 * Format, one record per line, '#' starts a comment, values with spaces in
 * double quotes (no escapes):
 *   driver version=580.95.05 cuda=13000
 *   init error=9
 *   gpu index=0 minor=0 uuid=GPU-... bus=00000000:18:00.0 name="..." [mig=disabled|enabled|unsupported]
 *       [maxmig=7] [pciid=0x233010DE] [arch=9.0] [brand=14]
 *   mig gpu=0 index=0 gi=2 ci=0 uuid=MIG-... name="..." gislices=3 cislices=3 memmb=40192 [sms=14]
 * Returns an NVML code: DRIVER_NOT_LOADED when there is no file (like a host
 * without the kernel module), UNKNOWN when it is malformed.
 */
static nvmlReturn_t fake_read_config(const char *path, struct fake_state *st)
{
    char buf[FAKE_LINE_SIZE];
    struct fake_line line;
    FILE *f;
    int rc = 0;

    memset(st, 0, sizeof *st);
    memset(&line, 0, sizeof line);
    line.path = path;

    f = fopen(path, "re");
    if (f == NULL) {
        if (errno != ENOENT)
            fprintf(stderr, "fake-nvml: %s: %s\n", path, strerror(errno));
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    while (rc == 0) {
        int r = fake_read_line(f, buf, sizeof buf);

        if (r == 0)
            break;
        line.lineno++;
        if (r < 0) {
            rc = fake_bad(&line, r == -1 ? "line too long" : "NUL byte in line", NULL);
            break;
        }
        switch (fake_tokenize(buf, &line)) {
        case 0:
            continue;
        case 1:
            break;
        default:
            rc = -1;
            continue;
        }
        if (strcmp(line.kind, "driver") == 0)
            rc = fake_record_driver(&line, st);
        else if (strcmp(line.kind, "init") == 0)
            rc = fake_record_init(&line, st);
        else if (strcmp(line.kind, "gpu") == 0)
            rc = fake_record_gpu(&line, st);
        else if (strcmp(line.kind, "mig") == 0)
            rc = fake_record_mig(&line, st);
        else
            rc = fake_bad(&line, "unknown record kind", line.kind);
    }
    if (rc == 0 && ferror(f))
        rc = fake_bad(&line, "read error", strerror(errno));
    fclose(f);
    if (rc == 0)
        rc = fake_validate(&line, st);
    return rc == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

/* The library's own path, not the cwd or a fixed location, decides which
 * config applies, so each test's copy of the library sees its own devices. */
static int fake_config_path(char *out, size_t size)
{
    const char *env = getenv("FAKE_NVML_CONFIG");
    Dl_info info;
    const char *slash;
    size_t dirlen;
    int n;

    if (env != NULL && env[0] != '\0') {
        n = snprintf(out, size, "%s", env);
        return (n < 0 || (size_t)n >= size) ? -1 : 0;
    }
    if (dladdr((void *)&nvmlInit_v2, &info) == 0 || info.dli_fname == NULL)
        return -1;
    slash = strrchr(info.dli_fname, '/');
    /* dli_fname is the name as opened; without a directory part that was the cwd. */
    dirlen = slash == NULL ? 1 : (size_t)(slash - info.dli_fname);
    if (dirlen + 1 + sizeof FAKE_CONFIG_NAME > size)
        return -1;
    memcpy(out, slash == NULL ? "." : info.dli_fname, dirlen);
    out[dirlen] = '/';
    memcpy(out + dirlen + 1, FAKE_CONFIG_NAME, sizeof FAKE_CONFIG_NAME);
    return 0;
}

/* ---- helpers for the API ------------------------------------------------ */

/* Only pointers we handed out are accepted: pynvml passes whatever the caller
 * kept, and a real driver rejects garbage with INVALID_ARGUMENT, not a crash.
 * Compared as integers since the pointer may not point into our arrays. */
static struct fake_device *fake_lookup(nvmlDevice_t handle)
{
    uintptr_t p = (uintptr_t)handle;
    uintptr_t gpus = (uintptr_t)&live.gpus[0];
    uintptr_t migs = (uintptr_t)&live.migs[0][0];
    size_t sz = sizeof(struct fake_device);
    size_t i;

    if (p >= gpus && p < gpus + sizeof live.gpus && (p - gpus) % sz == 0) {
        i = (p - gpus) / sz;
        return i < live.gpu_count ? &live.gpus[i] : NULL;
    }
    if (p >= migs && p < migs + sizeof live.migs && (p - migs) % sz == 0) {
        i = (p - migs) / sz;
        return live.migs[i / FAKE_MAX_MIGS][i % FAKE_MAX_MIGS].used
                   ? &live.migs[i / FAKE_MAX_MIGS][i % FAKE_MAX_MIGS]
                   : NULL;
    }
    return NULL;
}

/* Common prologue: init state, then handle, then output pointer, the order
 * in which NVML reports these errors. */
static nvmlReturn_t fake_device(nvmlDevice_t handle, const void *out, struct fake_device **d)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    *d = fake_lookup(handle);
    if (*d == NULL || out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_copy_string(char *buf, unsigned int length, const char *s)
{
    size_t n = strlen(s);

    if (n >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

/* ---- NVML API ----------------------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    char path[PATH_MAX];
    nvmlReturn_t rc;

    (void)flags;
    /* NVML counts inits; only the first one looks at the system, so handles
     * from an outer session stay valid across a nested init. */
    if (init_refs > 0) {
        init_refs++;
        return NVML_SUCCESS;
    }
    if (fake_config_path(path, sizeof path) != 0)
        return NVML_ERROR_UNKNOWN;
    rc = fake_read_config(path, &staged);
    if (rc != NVML_SUCCESS)
        return rc;
    if (staged.init_hang)
        for (;;)
            pause();
    if (staged.init_error != 0)
        return staged.init_error;
    /* Parsed aside and copied only on success so a bad config never leaves a
     * half-filled device table behind. */
    live = staged;
    init_refs = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    init_refs--;
    if (init_refs == 0)
        memset(&live, 0, sizeof live);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 20: return "Insufficient Memory";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return fake_copy_string(version, length, live.driver);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = live.cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = live.gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= live.gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (live.gpus[index].lost)
        return NVML_ERROR_GPU_IS_LOST;
    *device = &live.gpus[index];
    return NVML_SUCCESS;
}

/* GPU and MIG UUIDs alike, as NVML does. cdictk does not call it; nvidia-ctk's
 * generator does (for every device it writes), which bench/compare_generate.py
 * runs on the fake nodes. */
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    unsigned int g, m;

    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (g = 0; g < live.gpu_count; g++) {
        if (strcmp(live.gpus[g].uuid, uuid) == 0) {
            if (live.gpus[g].lost)
                return NVML_ERROR_GPU_IS_LOST;
            *device = &live.gpus[g];
            return NVML_SUCCESS;
        }
        for (m = 0; m < FAKE_MAX_MIGS; m++) {
            if (live.migs[g][m].used && strcmp(live.migs[g][m].uuid, uuid) == 0) {
                *device = &live.migs[g][m];
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* Full GPUs only. Whether NVML numbers a MIG device handle here (its slot on
 * the parent?) is not something the fake should guess: it refuses instead, so
 * code that needs it fails in tests rather than reading a made-up index. */
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, index, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *index = d->gpu;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, minorNumber, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    /* MIG devices have no /dev/nvidiaN of their own; access goes through
     * the parent node plus nvidia-caps, and NVML says so. */
    if (d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *minorNumber = d->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, uuid, &d);

    return rc != NVML_SUCCESS ? rc : fake_copy_string(uuid, length, d->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, name, &d);

    return rc != NVML_SUCCESS ? rc : fake_copy_string(name, length, d->name);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, pci, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    /* Stricter than some driver versions on purpose: code that asks the
     * parent GPU for PCI data works everywhere. */
    if (d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(pci, 0, sizeof *pci);
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->dev;
    pci->pciDeviceId = d->pci_id;
    /* The buffers are sized for the widest possible value of each field, so
     * these cannot truncate; NVML prints upper-case hex. */
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", d->domain & 0xffffffffu,
             d->bus & 0xffu, d->dev & 0x1fu);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", d->domain & 0xffffu,
             d->bus & 0xffu, d->dev & 0x1fu);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, currentMode, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (pendingMode == NULL || d->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode == FAKE_MIG_UNSUPPORTED)
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = *pendingMode = d->mig_mode == FAKE_MIG_ENABLED ? 1u : 0u;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, count, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Documented as zero "if MIG is not supported or enabled". */
    *count = d->mig_mode == FAKE_MIG_ENABLED ? d->max_mig : 0u;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, migDevice, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode == FAKE_MIG_UNSUPPORTED)
        return NVML_ERROR_NOT_SUPPORTED;
    if (d->mig_mode != FAKE_MIG_ENABLED || index >= d->max_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Indices are slots, not a dense list: callers must walk all of
     * 0..max-1 and skip the holes. */
    if (!live.migs[d->gpu][index].used)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = &live.migs[d->gpu][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(migDevice, device, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (!d->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &live.gpus[d->gpu];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, isMigDevice, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    *isMigDevice = d->is_mig ? 1u : 0u;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, id, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (!d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = d->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, id, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (!d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = d->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, attributes, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    /* NVML documents this query for MIG device handles only. */
    if (!d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    memset(attributes, 0, sizeof *attributes);
    attributes->multiprocessorCount = d->sms;
    attributes->gpuInstanceSliceCount = d->gi_slices;
    attributes->computeInstanceSliceCount = d->ci_slices;
    attributes->memorySizeMB = d->memory_mb;
    return NVML_SUCCESS;
}

/* MIG device handles are refused (NOT_SUPPORTED) for both of these, as for
 * the PCI info: code that asks the parent GPU works on every driver. */
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, major, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *major = d->arch_major;
    *minor = d->arch_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, int *type)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, type, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *type = d->brand;
    return NVML_SUCCESS;
}
