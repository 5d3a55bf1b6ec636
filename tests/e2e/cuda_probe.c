/* What a CUDA program does first: dlopen("libcuda.so.1") through the image's ld cache, then call into
 * it. The fake node's libcuda is a stub whose one function returns 0; the probe prints the file the
 * loader found, so a test sees which directory the container's ld cache sent it to. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (cuda == NULL) {
        printf("dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    int (*entry)(void) = (int (*)(void))dlsym(cuda, "cdictk_fake_libcuda_so_1");
    Dl_info info;
    if (entry == NULL || dladdr((void *)entry, &info) == 0) {
        printf("libcuda.so.1 has no entry point\n");
        return 1;
    }
    printf("libcuda.so.1 from %s returned %d\n", info.dli_fname, entry());
    return 0;
}
