/* A driver program's stand-in: a static ELF that prints "fake" and exits 0, on any rootfs. */
static long sys_call3(long n, long a, long b, long c)
{
    long ret;
#if defined(__x86_64__)
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b, x2 __asm__("x2") = c;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    ret = x0;
#else
#error "a fake driver program for x86_64 or aarch64 only"
#endif
    return ret;
}

#if defined(__x86_64__)
#define SYS_WRITE 1
#define SYS_EXIT 60
#else
#define SYS_WRITE 64
#define SYS_EXIT 93
#endif

void _start(void)
{
    static const char text[] = "fake\n";
    sys_call3(SYS_WRITE, 1, (long)text, sizeof text - 1);
    sys_call3(SYS_EXIT, 0, 0, 0);
    for (;;)
        ;
}
