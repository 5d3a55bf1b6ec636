/* CUDA's first steps without a CUDA toolkit: dlopen("libcuda.so.1") through the container's ld cache,
 * then cuInit and cuDeviceGetCount. With --dlopen it only loads the library and looks the two up (the
 * parallel burst: no GPU initialisation in each of 64 containers). Built where the bundle is made. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*init_fn)(unsigned int);
typedef int (*count_fn)(int *);

int main(int argc, char **argv) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (cuda == NULL) {
        printf("probe: dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    init_fn init;
    count_fn count;
    void *symbol = dlsym(cuda, "cuInit");
    memcpy(&init, &symbol, sizeof init);
    symbol = dlsym(cuda, "cuDeviceGetCount");
    memcpy(&count, &symbol, sizeof count);
    Dl_info info;
    if (init == NULL || count == NULL || dladdr((void *)dlsym(cuda, "cuInit"), &info) == 0) {
        printf("probe: libcuda.so.1 lacks cuInit or cuDeviceGetCount\n");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "--dlopen") == 0) {
        printf("probe: loaded %s\n", info.dli_fname);
        return 0;
    }
    int status = init(0);
    if (status != 0) {
        printf("probe: cuInit: CUresult %d (libcuda from %s)\n", status, info.dli_fname);
        return 1;
    }
    int devices = -1;
    status = count(&devices);
    if (status != 0 || devices < 1) {
        printf("probe: cuDeviceGetCount: CUresult %d, %d devices\n", status, devices);
        return 1;
    }
    printf("probe: cuInit ok, %d CUDA device(s), libcuda from %s\n", devices, info.dli_fname);
    return 0;
}
