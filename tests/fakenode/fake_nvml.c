/*
 * A stand-in for libnvidia-ml.so so that tests exercise the real pynvml code
 * path on machines without an NVIDIA GPU.  Only the calls cdictk makes are
 * provided, and the few more nvidia-ctk's generator needs for full GPUs and MIG
 * devices (for bench/compare_generate.py); anything else fails to resolve, which pynvml reports as
 * NVMLError_FunctionNotFound, so a new dependency on NVML shows up in tests
 * instead of silently returning made-up data.
 *
 * The devices come from a text file, fake-nvml.conf, read at every first
 * nvmlInit (see fake_read_config for its format).  It sits next to the library
 * file itself, so every test can build its own library + config pair in a
 * temporary directory and several can coexist in one process.
 *
 * Events (Xid errors) and GPUs that fall off the bus and come back are told to
 * the library at run time through a second file beside it, fake-nvml.events
 * (or FAKE_NVML_EVENTS), which tests append to (see fake_read_events).
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
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_UNKNOWN 999

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

#define FAKE_MAX_GPUS 32
#define FAKE_MAX_MIGS 7
#define FAKE_STR_SIZE 96     /* NVML_DEVICE_UUID_V2_BUFFER_SIZE and _NAME_V2_ */
#define FAKE_DRIVER_SIZE 80  /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
#define FAKE_LINE_SIZE 1024
#define FAKE_MAX_TOKENS 20
#define FAKE_KEY_SIZE 16
#define FAKE_CONFIG_NAME "fake-nvml.conf"
#define FAKE_EVENTS_NAME "fake-nvml.events"
#define FAKE_MAX_LINKS 18 /* NVML_NVLINK_MAX_LINKS of NVML 12 */
#define FAKE_MAX_SETS 8
#define FAKE_MAX_QUEUED 64
#define FAKE_DEFAULT_PCI_ID 0x233010DEu /* H100 SXM5 80GB */
/* What an H100 reports: compute capability 9.0 and, like every data-center
 * GPU since Ampere (and the T4 on current drivers), "Product Brand: NVIDIA". */
#define FAKE_DEFAULT_ARCH_MAJOR 9
#define FAKE_DEFAULT_ARCH_MINOR 0
#define NVML_BRAND_NVIDIA 14
/* An H100 80GB HBM3's total memory, as nvidia-smi shows it (81559MiB). */
#define FAKE_DEFAULT_MEMORY_MB 81559u
/* A MIG-capable GPU's memory is cut into eighths; a GPU instance owns some. */
#define FAKE_MEMORY_SLICES 8u

#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12
#define NVML_GPU_INSTANCE_PROFILE_CAPS_GFX 0x2
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT 0x1
#define NVML_COMPUTE_INSTANCE_PROFILE_CAPS_GFX 0x1
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96

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

/* The MIG structs below are nvml.h's, field for field (go-nvml and pynvml
 * copy them); the sizes are checked against nvml.h's version constants. */
typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlInstancePlacement_t; /* nvmlGpuInstancePlacement_t, nvmlComputeInstancePlacement_t */

typedef struct {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;

/* v3 drops isP2pSupported and adds capabilities at the end. */
typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;

typedef struct {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;

/* NVML_STRUCT_VERSION: the size in the low bits, the version in the top byte. */
#define FAKE_STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((ver) << 24u)))
/* What nvml.h (API 13, as go-nvml vendors it) gives for its version macros on
 * x86_64 and aarch64; pynvml spells out the v2 ones. */
_Static_assert(FAKE_STRUCT_VERSION(nvmlGpuInstanceProfileInfo_v2_t, 2) == 0x02000098u, "GI profile v2");
_Static_assert(FAKE_STRUCT_VERSION(nvmlGpuInstanceProfileInfo_v3_t, 3) == 0x03000098u, "GI profile v3");
_Static_assert(FAKE_STRUCT_VERSION(nvmlComputeInstanceProfileInfo_v2_t, 2) == 0x02000088u, "CI profile v2");
_Static_assert(FAKE_STRUCT_VERSION(nvmlComputeInstanceProfileInfo_v3_t, 3) == 0x0300008Cu, "CI profile v3");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48 && sizeof(nvmlComputeInstanceProfileInfo_t) == 36,
               "v1 profile info");

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
    unsigned int arch_id;       /* nvmlDeviceGetArchitecture: NVML_DEVICE_ARCH_*, by default the capability's */
    int brand;                  /* nvmlBrandType_t, any value: NVML adds brands */
    unsigned long long memory_mb; /* the GPU's total, or the MIG device's (its GPU instance's) */
    /* Topology (GPU only): the NUMA node and PCIe switch it hangs off (-1: not
     * told, and nvmlDeviceGetTopologyCommonAncestor answers NOT_SUPPORTED),
     * and the GPU at the other end of each NVLink (-1: link down). */
    int numa, pcisw, has_links;
    int links[FAKE_MAX_LINKS];
    unsigned long long events; /* the event types registered for it (one set) */
    /* MIG only */
    unsigned int gi, ci, gi_slices, ci_slices, sms;
    unsigned int copy_engines, decoders, encoders, jpegs, ofas; /* shared with its GPU instance's others */
    /* Derived at load from the above, the GPU's memory and the profile that
     * ends the name ("... MIG 1c.3g.40gb", "... MIG 1g.10gb+me"). */
    unsigned int gi_profile, ci_profile; /* NVML_*_INSTANCE_PROFILE_* */
    unsigned int mem_slices;             /* eighths of the GPU's memory */
    size_t profile_at, gi_name_at;       /* offsets in name: "1c.3g.40gb", "3g.40gb" */
};

struct fake_state {
    int have_driver;
    char driver[FAKE_DRIVER_SIZE];
    int cuda;
    int init_error;
    int init_hang; /* nvmlInit never returns, as with a driver stuck in the kernel */
    int no_events; /* nvmlEventSetCreate answers NOT_SUPPORTED, as an NVML without the event API */
    unsigned int gpu_count;
    struct fake_device gpus[FAKE_MAX_GPUS];
    struct fake_device migs[FAKE_MAX_GPUS][FAKE_MAX_MIGS];
};

typedef struct fake_device *nvmlDevice_t;

/* GPU and compute instance handles are the addresses of one slot each in
 * these arrays, [gpu][MIG slot]: a compute instance is named by its MIG
 * device's slot, a GPU instance by the first slot of a MIG device on it.
 * Never dereferenced, and no device handle, so a mix-up is rejected. */
struct fake_gpu_instance { char unused; };
struct fake_compute_instance { char unused; };
typedef struct fake_gpu_instance *nvmlGpuInstance_t;
typedef struct fake_compute_instance *nvmlComputeInstance_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* Static, not heap: handles stay valid pointers for the life of the process,
 * so a stale handle used after shutdown is rejected rather than dereferenced
 * as freed memory. */
static struct fake_state live;
static struct fake_state staged;
static unsigned int init_refs;
static struct fake_gpu_instance gi_handles[FAKE_MAX_GPUS][FAKE_MAX_MIGS];
static struct fake_compute_instance ci_handles[FAKE_MAX_GPUS][FAKE_MAX_MIGS];

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

static int fake_record_events(struct fake_line *l, struct fake_state *st)
{
    unsigned long long supported;

    if (fake_num(l, "supported", 1, 0, 1, &supported) != 0)
        return -1;
    st->no_events = !supported;
    return fake_check_all_seen(l);
}

/* An optional small number; -1 when the key is absent. */
static int fake_optional_int(struct fake_line *l, const char *key, int *out)
{
    unsigned long long v;
    const char *s = fake_get(l, key);

    if (s == NULL) {
        *out = -1;
        return 0;
    }
    if (fake_parse_num(s, 1023, &v) != 0)
        return fake_bad(l, "bad number for", key);
    *out = (int)v;
    return 0;
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

/* The NVML_DEVICE_ARCH_* of a compute capability, as NVML reports it for
 * the GPUs of each generation. */
static unsigned int fake_arch_id(int major, int minor)
{
    switch (major) {
    case 3:
        return 2; /* Kepler */
    case 5:
        return 3; /* Maxwell */
    case 6:
        return 4; /* Pascal */
    case 7:
        return minor < 5 ? 5 : 6; /* Volta, Turing */
    case 8:
        return minor == 9 ? 8 : 7; /* Ada, Ampere */
    case 9:
        return 9; /* Hopper */
    case 10:
    case 12:
        return 10; /* Blackwell */
    default:
        return 0xffffffffu; /* NVML_DEVICE_ARCH_UNKNOWN */
    }
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
        fake_uint(l, "lost", 0, 0, 1, &lost) != 0 ||
        fake_num(l, "memmb", 0, FAKE_DEFAULT_MEMORY_MB, ULLONG_MAX >> 20, &d->memory_mb) != 0)
        return -1;
    if (d->memory_mb == 0)
        return fake_bad(l, "memmb must be above 0", NULL);
    d->brand = (int)brand;
    d->lost = (int)lost;

    arch = fake_get(l, "arch");
    d->arch_major = FAKE_DEFAULT_ARCH_MAJOR;
    d->arch_minor = FAKE_DEFAULT_ARCH_MINOR;
    if (arch != NULL && fake_parse_arch(arch, &d->arch_major, &d->arch_minor) != 0)
        return fake_bad(l, "bad compute capability (want major.minor)", arch);
    if (fake_uint(l, "archid", 0, fake_arch_id(d->arch_major, d->arch_minor), UINT_MAX, &d->arch_id) != 0)
        return -1;

    if (fake_optional_int(l, "numa", &d->numa) != 0 || fake_optional_int(l, "pcisw", &d->pcisw) != 0)
        return -1;
    for (unsigned int k = 0; k < FAKE_MAX_LINKS; k++)
        d->links[k] = -1;

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

/* A nvlink record: link number `link` of GPU `gpu` goes to GPU `peer`. */
static int fake_record_nvlink(struct fake_line *l, struct fake_state *st)
{
    unsigned int gpu, link, peer;

    if (fake_uint(l, "gpu", 1, 0, FAKE_MAX_GPUS - 1, &gpu) != 0 ||
        fake_uint(l, "link", 1, 0, FAKE_MAX_LINKS - 1, &link) != 0 ||
        fake_uint(l, "peer", 1, 0, FAKE_MAX_GPUS - 1, &peer) != 0)
        return -1;
    if (!st->gpus[gpu].used || !st->gpus[peer].used || gpu == peer)
        return fake_bad(l, "nvlink between gpus that are not defined (gpu records first), or to itself", NULL);
    if (st->gpus[gpu].links[link] != -1)
        return fake_bad(l, "nvlink link defined twice", NULL);
    st->gpus[gpu].links[link] = (int)peer;
    st->gpus[gpu].has_links = 1;
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
        fake_uint(l, "sms", 0, 14, UINT_MAX, &d->sms) != 0 ||
        fake_uint(l, "ce", 0, 0, UINT_MAX, &d->copy_engines) != 0 ||
        fake_uint(l, "dec", 0, 0, UINT_MAX, &d->decoders) != 0 ||
        fake_uint(l, "enc", 0, 0, UINT_MAX, &d->encoders) != 0 ||
        fake_uint(l, "jpeg", 0, 0, UINT_MAX, &d->jpegs) != 0 ||
        fake_uint(l, "ofa", 0, 0, UINT_MAX, &d->ofas) != 0)
        return -1;
    d->used = 1;
    return fake_check_all_seen(l);
}

/* NVML's GPU instance profiles, by NVML_GPU_INSTANCE_PROFILE_* value: what
 * sets a MIG device's apart (its slices, the attributes that end its profile
 * name, two memory slices for one compute slice) and the profile ID that
 * nvmlDeviceGetGpuInstanceProfileInfo reports.  The IDs are an H100's for the
 * profiles it has (1g.10gb is 19, 7g.80gb 0); the others get 0x20 + value,
 * IDs no H100 profile has, so that a caller mixing up the two fails. */
static const struct {
    unsigned int slices;
    const char *suffix;
    int rev2;
    unsigned int id;
} fake_gi_profiles[NVML_GPU_INSTANCE_PROFILE_COUNT] = {
    {1, "", 0, 19},          {2, "", 0, 14},         {3, "", 0, 9},          {4, "", 0, 5},
    {7, "", 0, 0},           {8, "", 0, 0x25},       {6, "", 0, 0x26},       {1, "+me", 0, 20},
    {2, "+me", 0, 0x28},     {1, "", 1, 15},         {1, "+gfx", 0, 0x2A},   {2, "+gfx", 0, 0x2B},
    {4, "+gfx", 0, 0x2C},    {1, "-me", 0, 0x2D},    {2, "-me", 0, 0x2E},    {1, "+me.all", 0, 0x2F},
    {2, "+me.all", 0, 0x30}, {3, "+gfx", 0, 0x31},
};

/* The slices of each NVML_COMPUTE_INSTANCE_PROFILE_*, whose profile ID is its
 * value as on an H100.  The first with a MIG device's slices is its profile
 * (never 1_SLICE_REV1 or 7_SLICE_NVL). */
static const unsigned int fake_ci_slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6, 1, 7};

/* The profile that ends a MIG device's name ("... MIG 1c.3g.40gb+me"): its
 * compute and GPU instance slices, the offsets of the profile and of its GPU
 * instance part ("3g.40gb+me") in the name, and what follows the "gb". */
static int fake_parse_profile(struct fake_device *d, unsigned int *c, unsigned int *g, const char **suffix)
{
    const char *p = NULL, *s = d->name, *at;
    unsigned int gb;
    int n = 0;

    while ((at = strstr(s, "MIG ")) != NULL) {
        p = at + 4;
        s = at + 1;
    }
    /* sscanf's %u would also take a sign or spaces. */
    if (p == NULL || p[0] < '0' || p[0] > '9')
        return -1;
    if (sscanf(p, "%uc.%ug.%ugb%n", c, g, &gb, &n) == 3 && n > 0) {
        d->gi_name_at = (size_t)(strchr(p, '.') + 1 - d->name);
    } else if (sscanf(p, "%ug.%ugb%n", g, &gb, &n) == 2 && n > 0) {
        *c = *g;
        d->gi_name_at = (size_t)(p - d->name);
    } else {
        return -1;
    }
    d->profile_at = (size_t)(p - d->name);
    *suffix = p + n;
    return 0;
}

/* A MIG device's GPU and compute instance profiles and memory slices, from
 * its record and its GPU's memory. */
static int fake_mig_profiles(struct fake_line *l, const struct fake_device *gpu, struct fake_device *d)
{
    unsigned int c, g, p;
    const char *suffix;
    int rev2;

    if (fake_parse_profile(d, &c, &g, &suffix) != 0)
        return fake_bad(l, "mig name must end in MIG and a profile (1g.10gb, 1c.3g.40gb+me)", d->name);
    if (c != d->ci_slices || g != d->gi_slices)
        return fake_bad(l, "the profile in the mig name disagrees with gislices or cislices", d->name);
    if (d->memory_mb == 0 || d->memory_mb > gpu->memory_mb)
        return fake_bad(l, "mig memmb must be above 0 and at most its gpu's", d->uuid);
    d->mem_slices = (unsigned int)((d->memory_mb * FAKE_MEMORY_SLICES + gpu->memory_mb - 1) / gpu->memory_mb);
    rev2 = g == 1 && suffix[0] == '\0' && d->mem_slices >= 2;
    for (p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++)
        if (fake_gi_profiles[p].slices == g && fake_gi_profiles[p].rev2 == rev2 &&
            strcmp(fake_gi_profiles[p].suffix, suffix) == 0)
            break;
    if (p == NVML_GPU_INSTANCE_PROFILE_COUNT)
        return fake_bad(l, "no GPU instance profile has the slices and attributes of", d->name);
    d->gi_profile = p;
    for (p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT && fake_ci_slices[p] != c; p++)
        ;
    if (p == NVML_COMPUTE_INSTANCE_PROFILE_COUNT || c > g)
        return fake_bad(l, "no compute instance profile has the slices of", d->name);
    d->ci_profile = p;
    return 0;
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
            if (fake_mig_profiles(l, &st->gpus[g], &st->migs[g][m]) != 0)
                return -1;
            /* MIG devices on one GPU instance share its profile and memory. */
            for (unsigned int o = 0; o < m; o++) {
                const struct fake_device *a = &st->migs[g][o], *b = &st->migs[g][m];

                if (!a->used || a->gi != b->gi)
                    continue;
                if (a->ci == b->ci)
                    return fake_bad(l, "two mig devices with the same gi and ci", b->uuid);
                if (a->gi_profile != b->gi_profile || a->memory_mb != b->memory_mb)
                    return fake_bad(l, "mig devices on one gi with different profiles or memmb", b->uuid);
            }
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
 *   events supported=0     (nvmlEventSetCreate answers NOT_SUPPORTED)
 *   gpu index=0 minor=0 uuid=GPU-... bus=00000000:18:00.0 name="..." [mig=disabled|enabled|unsupported]
 *       [maxmig=7] [pciid=0x233010DE] [arch=9.0] [archid=9] [brand=14] [lost=0] [memmb=81559] [numa=0]
 *       [pcisw=0]     (archid: an NVML_DEVICE_ARCH_*, by default arch's generation's)
 *   nvlink gpu=0 link=0 peer=1     (after both gpu records; one line per direction)
 *   mig gpu=0 index=0 gi=2 ci=0 uuid=MIG-... name="... MIG 3g.40gb" gislices=3 cislices=3 memmb=40192 [sms=14]
 *       [ce=0] [dec=0] [enc=0] [jpeg=0] [ofa=0]   (its attributes' shared engine counts)
 * A MIG device's name ends in its profile, as NVML's do; the GPU and compute
 * instance queries derive their answers from it (see fake_mig_profiles).
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
        else if (strcmp(line.kind, "events") == 0)
            rc = fake_record_events(&line, st);
        else if (strcmp(line.kind, "gpu") == 0)
            rc = fake_record_gpu(&line, st);
        else if (strcmp(line.kind, "mig") == 0)
            rc = fake_record_mig(&line, st);
        else if (strcmp(line.kind, "nvlink") == 0)
            rc = fake_record_nvlink(&line, st);
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
static int fake_sibling_path(char *out, size_t size, const char *env_name, const char *file)
{
    const char *env = getenv(env_name);
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
    if (dirlen + 2 + strlen(file) > size)
        return -1;
    memcpy(out, slash == NULL ? "." : info.dli_fname, dirlen);
    out[dirlen] = '/';
    memcpy(out + dirlen + 1, file, strlen(file) + 1);
    return 0;
}

static int fake_config_path(char *out, size_t size)
{
    return fake_sibling_path(out, size, "FAKE_NVML_CONFIG", FAKE_CONFIG_NAME);
}

/* ---- events ------------------------------------------------------------- */

struct fake_event {
    struct fake_device *device;
    unsigned long long type, data;
    unsigned int gi, ci;
};

struct fake_event_set {
    int used;
    unsigned int head, count;
    struct fake_event queue[FAKE_MAX_QUEUED];
};

static struct fake_event_set event_sets[FAKE_MAX_SETS];
static long events_offset; /* how much of the events file has been applied */

#define NVML_EVENT_TYPE_SINGLE_BIT_ECC 0x1ULL
#define NVML_EVENT_TYPE_DOUBLE_BIT_ECC 0x2ULL
#define NVML_EVENT_TYPE_XID 0x8ULL
#define FAKE_NO_INSTANCE 0xFFFFFFFFu

static void fake_queue_event(struct fake_device *gpu, unsigned long long xid, unsigned int gi, unsigned int ci)
{
    for (unsigned int i = 0; i < FAKE_MAX_SETS; i++) {
        struct fake_event_set *set = &event_sets[i];
        struct fake_event *e;

        if (!set->used || !(gpu->events & NVML_EVENT_TYPE_XID) || set->count == FAKE_MAX_QUEUED)
            continue;
        e = &set->queue[(set->head + set->count) % FAKE_MAX_QUEUED];
        e->device = gpu;
        e->type = NVML_EVENT_TYPE_XID;
        e->data = xid;
        e->gi = gi;
        e->ci = ci;
        set->count++;
    }
}

/*
 * The events file, one record per line, appended to while the library runs:
 *   xid gpu=3 xid=79 [gi=2 ci=0]   an Xid error on GPU 3 (on a MIG device's GPU and compute instance)
 *   lost gpu=3                     GPU 3 falls off the bus: its handle lookups answer "GPU is lost"
 *   recover gpu=3                  GPU 3 answers again
 * Read from where the last read stopped. The first read (at nvmlInit) applies lost and recover and
 * skips xid lines: a process hears only of errors raised after it started, as with a real driver.
 * A malformed line is reported on stderr and skipped.
 */
static void fake_read_events(int replay)
{
    char path[PATH_MAX], buf[FAKE_LINE_SIZE];
    struct fake_line line;
    FILE *f;

    if (fake_sibling_path(path, sizeof path, "FAKE_NVML_EVENTS", FAKE_EVENTS_NAME) != 0)
        return;
    f = fopen(path, "re");
    if (f == NULL)
        return;
    if (fseek(f, events_offset, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    memset(&line, 0, sizeof line);
    line.path = path;
    for (;;) {
        long start = ftell(f);
        unsigned int gpu, gi, ci;
        unsigned long long xid;
        int r = fake_read_line(f, buf, sizeof buf);

        /* A line still being written (no newline yet) waits for the next read. */
        if (r == 0 || (r > 0 && feof(f))) {
            events_offset = start;
            break;
        }
        line.lineno++;
        if (r < 0 || fake_tokenize(buf, &line) != 1)
            continue;
        if (fake_uint(&line, "gpu", 1, 0, FAKE_MAX_GPUS - 1, &gpu) != 0)
            continue;
        if (gpu >= live.gpu_count) {
            fake_bad(&line, "no such gpu", NULL);
            continue;
        }
        if (strcmp(line.kind, "lost") == 0 && fake_check_all_seen(&line) == 0) {
            live.gpus[gpu].lost = 1;
        } else if (strcmp(line.kind, "recover") == 0 && fake_check_all_seen(&line) == 0) {
            live.gpus[gpu].lost = 0;
        } else if (strcmp(line.kind, "xid") == 0) {
            if (fake_num(&line, "xid", 1, 0, ULLONG_MAX, &xid) != 0 ||
                fake_uint(&line, "gi", 0, FAKE_NO_INSTANCE, UINT_MAX, &gi) != 0 ||
                fake_uint(&line, "ci", 0, FAKE_NO_INSTANCE, UINT_MAX, &ci) != 0 || fake_check_all_seen(&line) != 0)
                continue;
            if (!replay)
                fake_queue_event(&live.gpus[gpu], xid, gi, ci);
        } else {
            fake_bad(&line, "unknown event record", line.kind);
        }
        events_offset = ftell(f);
    }
    fclose(f);
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

/* The slot of the first MIG device on GPU instance gi of GPU g, whose handle
 * is the GPU instance's; FAKE_MAX_MIGS if there is none. */
static unsigned int fake_gi_slot(unsigned int g, unsigned int gi)
{
    unsigned int m;

    for (m = 0; m < FAKE_MAX_MIGS; m++)
        if (live.migs[g][m].used && live.migs[g][m].gi == gi)
            break;
    return m;
}

_Static_assert(sizeof gi_handles == FAKE_MAX_GPUS * FAKE_MAX_MIGS &&
                   sizeof ci_handles == FAKE_MAX_GPUS * FAKE_MAX_MIGS,
               "one byte per instance handle");

/* The MIG device whose slot an instance handle is, or NULL: as for devices,
 * only handles we handed out are accepted. */
static struct fake_device *fake_instance_lookup(const void *handle, const void *handles, int gpu_instance)
{
    uintptr_t p = (uintptr_t)handle, base = (uintptr_t)handles;
    struct fake_device *d;
    size_t i;

    if (p < base || p >= base + FAKE_MAX_GPUS * FAKE_MAX_MIGS)
        return NULL;
    i = p - base;
    d = &live.migs[i / FAKE_MAX_MIGS][i % FAKE_MAX_MIGS];
    if (!d->used || (gpu_instance && fake_gi_slot(d->gpu, d->gi) != i % FAKE_MAX_MIGS))
        return NULL;
    return d;
}

/* fake_device's prologue for GPU and compute instance handles. */
static nvmlReturn_t fake_gpu_instance(nvmlGpuInstance_t handle, const void *out, struct fake_device **d)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    *d = fake_instance_lookup(handle, gi_handles, 1);
    return (*d == NULL || out == NULL) ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

static nvmlReturn_t fake_compute_instance(nvmlComputeInstance_t handle, const void *out, struct fake_device **d)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    *d = fake_instance_lookup(handle, ci_handles, 0);
    return (*d == NULL || out == NULL) ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
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
    memset(event_sets, 0, sizeof event_sets);
    events_offset = 0;
    fake_read_events(1);
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
    fake_read_events(0);
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
    fake_read_events(0);
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
    attributes->sharedCopyEngineCount = d->copy_engines;
    attributes->sharedDecoderCount = d->decoders;
    attributes->sharedEncoderCount = d->encoders;
    attributes->sharedJpegCount = d->jpegs;
    attributes->sharedOfaCount = d->ofas;
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

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, arch, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *arch = d->arch_id;
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

/* ---- MIG: memory, GPU and compute instances ----------------------------- */
/* cdictk's discovery asks a MIG device's GPU instance (its profile ID and
 * placement) and the GPU's GPU instance profiles, which name it for DRA;
 * nvidia-ctk's generator asks them all of every MIG device (go-nvlib's
 * MigDevice.GetProfile), and bench/compare_generate.py runs it on the fake
 * nodes.  The config describes a profile only through the MIG devices
 * that use it, so a GPU reports the GPU instance profiles of its MIG devices
 * and a GPU instance the compute instance profiles of its own: the others
 * answer NOT_SUPPORTED, as a profile the GPU lacks does. */

/* Nothing allocated: all of it free. A MIG device has its GPU instance's. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, memory, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    memory->total = memory->free = d->memory_mb << 20;
    memory->used = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, gpuInstance, &d);
    unsigned int m;

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode != FAKE_MIG_ENABLED)
        return NVML_ERROR_NOT_SUPPORTED;
    m = fake_gi_slot(d->gpu, id);
    if (m == FAKE_MAX_MIGS)
        return NVML_ERROR_NOT_FOUND;
    *gpuInstance = &gi_handles[d->gpu][m];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance)
{
    struct fake_device *gi;
    nvmlReturn_t rc = fake_gpu_instance(gpuInstance, computeInstance, &gi);

    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned int m = 0; m < FAKE_MAX_MIGS; m++) {
        const struct fake_device *d = &live.migs[gi->gpu][m];

        if (d->used && d->gi == gi->gi && d->ci == id) {
            *computeInstance = &ci_handles[gi->gpu][m];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* GPU instances sit in the GPU's memory slices in the order of their first
 * MIG slots, compute instances in their GPU instance's compute slices in slot
 * order: made up, as the config has no placements, but never overlapping. */
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    struct fake_device *gi;
    nvmlReturn_t rc = fake_gpu_instance(gpuInstance, info, &gi);
    unsigned int start = 0;

    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned int m = 0; m < FAKE_MAX_MIGS; m++) {
        const struct fake_device *d = &live.migs[gi->gpu][m];

        if (d == gi)
            break;
        if (d->used && fake_gi_slot(gi->gpu, d->gi) == m)
            start += d->mem_slices;
    }
    memset(info, 0, sizeof *info);
    info->device = &live.gpus[gi->gpu];
    info->id = gi->gi;
    info->profileId = fake_gi_profiles[gi->gi_profile].id;
    info->placement.start = start;
    info->placement.size = gi->mem_slices;
    return NVML_SUCCESS;
}

/* The _v2 that nvml.h maps nvmlComputeInstanceGetInfo to, and pynvml calls;
 * go-nvml calls it where it exists, else the first version, which takes the
 * same struct. */
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    struct fake_device *ci;
    nvmlReturn_t rc = fake_compute_instance(computeInstance, info, &ci);
    unsigned int start = 0;

    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned int m = 0; &live.migs[ci->gpu][m] != ci; m++)
        if (live.migs[ci->gpu][m].used && live.migs[ci->gpu][m].gi == ci->gi)
            start += live.migs[ci->gpu][m].ci_slices;
    memset(info, 0, sizeof *info);
    info->device = &live.gpus[ci->gpu];
    info->gpuInstance = &gi_handles[ci->gpu][fake_gi_slot(ci->gpu, ci->gi)];
    info->id = ci->ci;
    info->profileId = ci->ci_profile;
    info->placement.start = start;
    info->placement.size = ci->ci_slices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

#define FAKE_GI_PROFILE_V2 FAKE_STRUCT_VERSION(nvmlGpuInstanceProfileInfo_v2_t, 2)
#define FAKE_GI_PROFILE_V3 FAKE_STRUCT_VERSION(nvmlGpuInstanceProfileInfo_v3_t, 3)
#define FAKE_CI_PROFILE_V2 FAKE_STRUCT_VERSION(nvmlComputeInstanceProfileInfo_v2_t, 2)
#define FAKE_CI_PROFILE_V3 FAKE_STRUCT_VERSION(nvmlComputeInstanceProfileInfo_v3_t, 3)

/* The first MIG device of the GPU whose GPU instance has this profile. With
 * versioned set, info is a versioned struct whose version must be v2 or v3. */
static nvmlReturn_t fake_gi_profile(nvmlDevice_t device, unsigned int profile, const void *info, int versioned,
                                    const struct fake_device **mig)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, info, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (versioned && *(const unsigned int *)info != FAKE_GI_PROFILE_V2 &&
        *(const unsigned int *)info != FAKE_GI_PROFILE_V3)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* INVALID_ARGUMENT past the last profile: how callers find the end. */
    if (d->is_mig || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig_mode != FAKE_MIG_ENABLED)
        return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int m = 0; m < FAKE_MAX_MIGS; m++) {
        if (live.migs[d->gpu][m].used && live.migs[d->gpu][m].gi_profile == profile) {
            *mig = &live.migs[d->gpu][m];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

/* A profile's answers, the fields of all three versions (v3 has them all but
 * isP2pSupported, 0 here), from a MIG device that uses it.  How many fit: as
 * many as the GPU's compute slices and its memory slices allow, and one of a
 * profile with the media engines (+me, +me.all). The SMs: the MIG device's,
 * scaled up when its compute instance is smaller than the GPU instance. */
static void fake_gi_profile_info(const struct fake_device *mig, nvmlGpuInstanceProfileInfo_v3_t *out)
{
    const char *suffix = fake_gi_profiles[mig->gi_profile].suffix;
    unsigned int fit = live.gpus[mig->gpu].max_mig / mig->gi_slices;

    if (fit > FAKE_MEMORY_SLICES / mig->mem_slices)
        fit = FAKE_MEMORY_SLICES / mig->mem_slices;
    memset(out, 0, sizeof *out);
    out->version = FAKE_GI_PROFILE_V3;
    out->id = fake_gi_profiles[mig->gi_profile].id;
    out->sliceCount = mig->gi_slices;
    out->instanceCount = strncmp(suffix, "+me", 3) == 0 ? 1 : fit;
    out->multiprocessorCount = mig->sms * mig->gi_slices / mig->ci_slices;
    /* A compute instance shares its GPU instance's engines: the MIG device's are the profile's. */
    out->copyEngineCount = mig->copy_engines;
    out->decoderCount = mig->decoders;
    out->encoderCount = mig->encoders;
    out->jpegCount = mig->jpegs;
    out->ofaCount = mig->ofas;
    out->memorySizeMB = mig->memory_mb;
    /* "MIG 3g.40gb": fits, as the name's part is shorter than the name. */
    memcpy(out->name, "MIG ", 4);
    strncpy(out->name + 4, mig->name + mig->gi_name_at, sizeof out->name - 5);
    out->capabilities = strcmp(suffix, "+gfx") == 0 ? NVML_GPU_INSTANCE_PROFILE_CAPS_GFX : 0;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    const struct fake_device *mig;
    nvmlGpuInstanceProfileInfo_v3_t v3;
    nvmlReturn_t rc = fake_gi_profile(device, profile, info, 0, &mig);

    if (rc != NVML_SUCCESS)
        return rc;
    fake_gi_profile_info(mig, &v3);
    memset(info, 0, sizeof *info);
    info->id = v3.id;
    info->sliceCount = v3.sliceCount;
    info->instanceCount = v3.instanceCount;
    info->multiprocessorCount = v3.multiprocessorCount;
    info->copyEngineCount = v3.copyEngineCount;
    info->decoderCount = v3.decoderCount;
    info->encoderCount = v3.encoderCount;
    info->jpegCount = v3.jpegCount;
    info->ofaCount = v3.ofaCount;
    info->memorySizeMB = v3.memorySizeMB;
    return NVML_SUCCESS;
}

/* Takes a v2 or a v3 struct, as its version field says (pynvml's default). */
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const struct fake_device *mig;
    nvmlGpuInstanceProfileInfo_v3_t v3;
    nvmlReturn_t rc = fake_gi_profile(device, profile, info, 1, &mig);

    if (rc != NVML_SUCCESS)
        return rc;
    fake_gi_profile_info(mig, &v3);
    if (info->version == FAKE_GI_PROFILE_V3) {
        memcpy(info, &v3, sizeof v3);
        return NVML_SUCCESS;
    }
    memset(info, 0, sizeof *info);
    info->version = FAKE_GI_PROFILE_V2;
    info->id = v3.id;
    info->sliceCount = v3.sliceCount;
    info->instanceCount = v3.instanceCount;
    info->multiprocessorCount = v3.multiprocessorCount;
    info->copyEngineCount = v3.copyEngineCount;
    info->decoderCount = v3.decoderCount;
    info->encoderCount = v3.encoderCount;
    info->jpegCount = v3.jpegCount;
    info->ofaCount = v3.ofaCount;
    info->memorySizeMB = v3.memorySizeMB;
    memcpy(info->name, v3.name, sizeof info->name);
    return NVML_SUCCESS;
}

/* The first MIG device on the GPU instance whose compute instance has this
 * profile; versioned as for fake_gi_profile. */
static nvmlReturn_t fake_ci_profile(nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
                                    const void *info, int versioned, const struct fake_device **mig)
{
    struct fake_device *gi;
    nvmlReturn_t rc = fake_gpu_instance(gpuInstance, info, &gi);

    if (rc != NVML_SUCCESS)
        return rc;
    if (versioned && *(const unsigned int *)info != FAKE_CI_PROFILE_V2 &&
        *(const unsigned int *)info != FAKE_CI_PROFILE_V3)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int m = 0; m < FAKE_MAX_MIGS; m++) {
        const struct fake_device *d = &live.migs[gi->gpu][m];

        if (d->used && d->gi == gi->gi && d->ci_profile == profile) {
            *mig = d;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

/* As fake_gi_profile_info: all fields but the version's, which v2 lacks. */
static void fake_ci_profile_info(const struct fake_device *mig, nvmlComputeInstanceProfileInfo_v3_t *out)
{
    memset(out, 0, sizeof *out);
    out->version = FAKE_CI_PROFILE_V3;
    out->id = mig->ci_profile;
    out->sliceCount = mig->ci_slices;
    out->instanceCount = mig->gi_slices / mig->ci_slices;
    out->multiprocessorCount = mig->sms;
    /* "MIG 1c.3g.40gb", or "MIG 3g.40gb" for the whole GPU instance. */
    memcpy(out->name, "MIG ", 4);
    strncpy(out->name + 4, mig->name + mig->profile_at, sizeof out->name - 5);
    if (strcmp(fake_gi_profiles[mig->gi_profile].suffix, "+gfx") == 0)
        out->capabilities = NVML_COMPUTE_INSTANCE_PROFILE_CAPS_GFX;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info)
{
    const struct fake_device *mig;
    nvmlComputeInstanceProfileInfo_v3_t v3;
    nvmlReturn_t rc = fake_ci_profile(gpuInstance, profile, engProfile, info, 0, &mig);

    if (rc != NVML_SUCCESS)
        return rc;
    fake_ci_profile_info(mig, &v3);
    memset(info, 0, sizeof *info);
    info->id = v3.id;
    info->sliceCount = v3.sliceCount;
    info->instanceCount = v3.instanceCount;
    info->multiprocessorCount = v3.multiprocessorCount;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info)
{
    const struct fake_device *mig;
    nvmlComputeInstanceProfileInfo_v3_t v3;
    nvmlReturn_t rc = fake_ci_profile(gpuInstance, profile, engProfile, info, 1, &mig);

    if (rc != NVML_SUCCESS)
        return rc;
    fake_ci_profile_info(mig, &v3);
    if (info->version == FAKE_CI_PROFILE_V3) {
        memcpy(info, &v3, sizeof v3);
        return NVML_SUCCESS;
    }
    /* v2 is v3 without capabilities, which come last. */
    memcpy(info, &v3, sizeof *info);
    info->version = FAKE_CI_PROFILE_V2;
    return NVML_SUCCESS;
}

/* ---- events and topology (the device plugin's health checks and allocation) ---- */

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct fake_event_set *nvmlEventSet_t;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (live.no_events)
        return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int i = 0; i < FAKE_MAX_SETS; i++) {
        if (!event_sets[i].used) {
            memset(&event_sets[i], 0, sizeof event_sets[i]);
            event_sets[i].used = 1;
            *set = &event_sets[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_UNKNOWN;
}

static struct fake_event_set *fake_set(nvmlEventSet_t set)
{
    uintptr_t p = (uintptr_t)set, base = (uintptr_t)event_sets;

    if (p < base || p >= base + sizeof event_sets || (p - base) % sizeof event_sets[0] != 0)
        return NULL;
    return event_sets[(p - base) / sizeof event_sets[0]].used ? set : NULL;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    struct fake_event_set *found;

    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    found = fake_set(set);
    if (found == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    found->used = 0;
    return NVML_SUCCESS;
}

/* Xid and ECC events on every GPU; none on a MIG device (NVML registers them on the GPU). */
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, types, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (d->lost)
        return NVML_ERROR_GPU_IS_LOST;
    *types = NVML_EVENT_TYPE_SINGLE_BIT_ECC | NVML_EVENT_TYPE_DOUBLE_BIT_ECC | NVML_EVENT_TYPE_XID;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, &types, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (fake_set(set) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (d->lost)
        return NVML_ERROR_GPU_IS_LOST;
    d->events |= types;
    return NVML_SUCCESS;
}

/* Polls the events file every 10 ms until an event is queued or the time is up. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    struct fake_event_set *found;
    unsigned int waited = 0;

    if (init_refs == 0)
        return NVML_ERROR_UNINITIALIZED;
    found = fake_set(set);
    if (found == NULL || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (;;) {
        fake_read_events(0);
        if (found->count > 0) {
            const struct fake_event *e = &found->queue[found->head];

            data->device = e->device;
            data->eventType = e->type;
            data->eventData = e->data;
            data->gpuInstanceId = e->gi;
            data->computeInstanceId = e->ci;
            found->head = (found->head + 1) % FAKE_MAX_QUEUED;
            found->count--;
            return NVML_SUCCESS;
        }
        if (waited >= timeoutms)
            return NVML_ERROR_TIMEOUT;
        usleep(10000);
        waited += 10;
    }
}

/* nvmlGpuTopologyLevel_t: the same PCIe switch, else the same NUMA node, else across CPUs. */
#define NVML_TOPOLOGY_SINGLE 10
#define NVML_TOPOLOGY_NODE 40
#define NVML_TOPOLOGY_SYSTEM 50

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2, int *level)
{
    struct fake_device *a, *b;
    nvmlReturn_t rc = fake_device(device1, level, &a);

    if (rc != NVML_SUCCESS || (rc = fake_device(device2, level, &b)) != NVML_SUCCESS)
        return rc;
    if (a->is_mig || b->is_mig || a->numa < 0 || b->numa < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (a->pcisw >= 0 && a->pcisw == b->pcisw)
        *level = NVML_TOPOLOGY_SINGLE;
    else if (a->numa == b->numa)
        *level = NVML_TOPOLOGY_NODE;
    else
        *level = NVML_TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, isActive, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig || !d->has_links)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= FAKE_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = d->links[link] >= 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    struct fake_device *d;
    nvmlReturn_t rc = fake_device(device, pci, &d);

    if (rc != NVML_SUCCESS)
        return rc;
    if (d->is_mig || !d->has_links)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= FAKE_MAX_LINKS || d->links[link] < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return nvmlDeviceGetPciInfo_v3(&live.gpus[d->links[link]], pci);
}
