// LD_PRELOAD probe, native only: what a library does with the driver's
// private "tools module" export table 6e163fbe-b958444d-835ce182-aff1991e.
// Logs every call into that table (six integer arguments, the result), each
// callback the driver makes through it, the object handed to the callback
// (its non-zero quadwords), and, with EXPTRACE_GUARD=1, which offsets of a
// guarded copy of that object are read, and by which code (library+offset).
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

typedef uintptr_t (*fn6)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t);
static const unsigned char TOOLS_MODULE[16] = {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                                               0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e};
static void *real_table[128];
static void *our_table[128];
static size_t nslots;
static int guard_on;
static char *guard; /* two pages: the copy of the object */
#define GUARD_LEN 8192
static uintptr_t seen_obj[64];
static int nseen;

static const char *where(uintptr_t pc, uintptr_t *off) {
  Dl_info i;
  if (dladdr((void *)pc, &i) && i.dli_fname) {
    *off = pc - (uintptr_t)i.dli_fbase;
    const char *s = strrchr(i.dli_fname, '/');
    return s ? s + 1 : i.dli_fname;
  }
  *off = pc;
  return "?";
}

static struct {
  uint32_t off;
  uintptr_t pc;
} reads[512];
static int nreads;
static void on_segv(int sig, siginfo_t *si, void *ucv) {
  ucontext_t *uc = ucv;
  char *a = si->si_addr;
  if (guard && a >= guard && a < guard + GUARD_LEN) {
    uintptr_t pc = uc->uc_mcontext.gregs[REG_RIP];
    uint32_t off = (uint32_t)(a - guard);
    int dup = 0;
    for (int k = 0; k < nreads; k++)
      if (reads[k].off == off && reads[k].pc == pc) dup = 1;
    if (!dup && nreads < 512) {
      reads[nreads].off = off;
      reads[nreads].pc = pc;
      nreads++;
      uintptr_t o;
      const char *w = where(pc, &o);
      char b[200];
      int n = snprintf(b, sizeof b, "EXPTRACE read obj+%#x by %s+%#lx\n", off, w, (unsigned long)o);
      write(2, b, n);
    }
    mprotect(guard, GUARD_LEN, PROT_READ | PROT_WRITE);
    uc->uc_mcontext.gregs[REG_EFL] |= 0x100;
    return;
  }
  signal(SIGSEGV, SIG_DFL);
}
static void on_trap(int sig, siginfo_t *si, void *ucv) {
  ucontext_t *uc = ucv;
  uc->uc_mcontext.gregs[REG_EFL] &= ~0x100UL;
  if (guard) mprotect(guard, GUARD_LEN, PROT_NONE);
}

static void dump_obj(uintptr_t obj) {
  uint64_t q[0x600 / 8];
  struct iovec l = {q, sizeof q}, r = {(void *)obj, sizeof q};
  ssize_t n = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
  if (n <= 0) {
    fprintf(stderr, "EXPTRACE obj %#lx unreadable\n", (unsigned long)obj);
    return;
  }
  fprintf(stderr, "EXPTRACE obj %#lx (%zd bytes readable):", (unsigned long)obj, n);
  for (int k = 0; k < n / 8; k++)
    if (q[k]) fprintf(stderr, " +%#x=%#llx", k * 8, (unsigned long long)q[k]);
  fprintf(stderr, "\n");
}

/* The callback the library passed: wrapped to see what the driver gives it. */
static fn6 user_cb;
static int cb_arg_index;
static uintptr_t cb_wrap(uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f) {
  fprintf(stderr, "EXPTRACE  callback(%#lx, %#lx, %#lx, %#lx)\n", a, b, c, d);
  if (c > 0x10000) {
    char name[200] = {0};
    struct iovec l = {name, 199}, r = {(void *)c, 199};
    if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) > 0) fprintf(stderr, "EXPTRACE   arg2 string: %.120s\n", name);
  }
  static CUresult (*getname)(const char **, CUfunction);
  if (!getname) getname = dlsym(RTLD_NEXT, "cuFuncGetName");
  const char *name = NULL;
  CUresult gr = getname ? getname(&name, (CUfunction)b) : 999;
  fprintf(stderr, "EXPTRACE   cuFuncGetName(arg1) -> %d %s\n", gr, gr == 0 ? name : "");
  dump_obj(b);
  if (nseen < 64) seen_obj[nseen++] = b;
  if (guard_on && !guard) {
    guard = mmap(NULL, GUARD_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct iovec l = {guard, 0x600}, r = {(void *)b, 0x600};
    process_vm_readv(getpid(), &l, 1, &r, 1, 0);
    mprotect(guard, GUARD_LEN, PROT_NONE);
    b = (uintptr_t)guard;
    fprintf(stderr, "EXPTRACE   handing a guarded copy %p\n", guard);
  }
  uintptr_t r = user_cb(a, b, c, d, e, f);
  fprintf(stderr, "EXPTRACE  callback -> %#lx\n", r);
  return r;
}

static uintptr_t slot_call(int i, uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f) {
  uintptr_t args[6] = {a, b, c, d, e, f};
  fprintf(stderr, "EXPTRACE 6e16[%d](%#lx, %#lx, %#lx, %#lx, %#lx, %#lx)\n", i, a, b, c, d, e, f);
  if (i == 7) {
    dump_obj(a);
    dump_obj(b);
  }
  for (int k = 0; k < 6; k++) {
    uintptr_t o;
    const char *w = where(args[k], &o);
    if (args[k] > 0x10000 && strcmp(w, "?") && !strstr(w, "libcuda.so") && !user_cb) {
      Dl_info di;
      if (dladdr((void *)args[k], &di) && di.dli_sname)
        fprintf(stderr, "EXPTRACE   arg%d = %s:%s\n", k, w, di.dli_sname);
      else
        fprintf(stderr, "EXPTRACE   arg%d = %s+%#lx (code? wrapped)\n", k, w, (unsigned long)o);
      user_cb = (fn6)args[k];
      cb_arg_index = k;
      args[k] = (uintptr_t)cb_wrap;
    }
  }
  uintptr_t r = ((fn6)real_table[i])(args[0], args[1], args[2], args[3], args[4], args[5]);
  if (user_cb) user_cb = NULL;
  fprintf(stderr, "EXPTRACE 6e16[%d] -> %#lx\n", i, r);
  return r;
}
#define S(i)                                                                                            \
  static uintptr_t s##i(uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f) { \
    return slot_call(i, a, b, c, d, e, f);                                                              \
  }
// One wrapper per slot (a slot's index is all that tells them apart).
// clang-format off
S(1) S(2) S(3) S(4) S(5) S(6) S(7) S(8) S(9) S(10) S(11) S(12) S(13) S(14) S(15) S(16) S(17) S(18) S(19) S(20)
S(21) S(22) S(23) S(24) S(25) S(26) S(27) S(28) S(29) S(30) S(31) S(32) S(33) S(34) S(35) S(36) S(37) S(38) S(39) S(40)
    // clang-format on
    static void *stubs[] = {0,   s1,  s2,  s3,  s4,  s5,  s6,  s7,  s8,  s9,  s10, s11, s12, s13,
                            s14, s15, s16, s17, s18, s19, s20, s21, s22, s23, s24, s25, s26, s27,
                            s28, s29, s30, s31, s32, s33, s34, s35, s36, s37, s38, s39, s40};

static CUresult (*real_get_export)(const void **, const CUuuid *);
CUresult cuGetExportTable(const void **pp, const CUuuid *id) {
  CUresult (*real)(const void **, const CUuuid *) = real_get_export;
  if (!real) real = real_get_export = dlsym(RTLD_NEXT, "cuGetExportTable");
  CUresult r = real(pp, id);
  if (id) {
    const unsigned char *u = id->bytes;
    fprintf(stderr,
            "EXPTRACE cuGetExportTable %02x%02x%02x%02x-%02x%02x%02x%02x-%02x%02x%02x%02x-%02x%02x%02x%02x -> %d\n",
            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15], r);
  }
  if (r == CUDA_SUCCESS && id && !memcmp(id->bytes, TOOLS_MODULE, 16)) {
    const uintptr_t *t = *pp;
    size_t bytes = t[0];
    nslots = bytes / 8;
    if (nslots > 41) nslots = 41;
    fprintf(stderr, "EXPTRACE table 6e16: %zu bytes\n", bytes);
    memcpy(real_table, t, nslots * 8);
    our_table[0] = (void *)t[0];
    for (size_t i = 1; i < nslots; i++) our_table[i] = stubs[i];
    *pp = our_table;
    guard_on = getenv("EXPTRACE_GUARD") && atoi(getenv("EXPTRACE_GUARD"));
    if (guard_on) {
      struct sigaction sa = {0};
      sa.sa_flags = SA_SIGINFO;
      sa.sa_sigaction = on_segv;
      sigaction(SIGSEGV, &sa, NULL);
      sa.sa_sigaction = on_trap;
      sigaction(SIGTRAP, &sa, NULL);
    }
  }
  return r;
}

/* What the library launches: is it one of the objects the table handed out? */
static CUresult (*real_launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               CUstream, void **, void **);
static CUresult launch_wrap(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                            unsigned sh, CUstream s, void **p, void **x) {
  static int n;
  int known = 0;
  for (int k = 0; k < nseen; k++)
    if ((uintptr_t)f == seen_obj[k]) known = 1;
  if (n++ < 20)
    fprintf(stderr, "EXPTRACE cuLaunchKernel(%p%s, grid %u %u %u, block %u %u %u)\n", (void *)f,
            known ? " = table object" : (guard && (char *)f == guard ? " = guarded copy" : ""), a, b, c, d, e, g);
  return real_launch(f, a, b, c, d, e, g, sh, s, p, x);
}
static CUresult (*real_gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *st) {
  CUresult (*real)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = real_gpa;
  if (!real) real = real_gpa = dlsym(RTLD_NEXT, "cuGetProcAddress_v2");
  CUresult r = real(sym, pfn, ver, flags, st);
  if (sym && (!strncmp(sym, "cuFunc", 6) || !strncmp(sym, "cuLaunch", 8) || !strncmp(sym, "cuKernel", 8) ||
              !strncmp(sym, "cuModule", 8) || !strncmp(sym, "cuLibrary", 9)))
    fprintf(stderr, "EXPTRACE gpa %s -> %d\n", sym, r);
  if (r == CUDA_SUCCESS && sym && !strcmp(sym, "cuLaunchKernel") && *pfn) {
    real_launch = *pfn;
    *pfn = (void *)launch_wrap;
  }
  if (r == CUDA_SUCCESS && sym && !strcmp(sym, "cuGetExportTable") && *pfn) {
    real_get_export = *pfn;
    *pfn = (void *)cuGetExportTable;
  }
  return r;
}

/* cudart finds the driver with dlopen and dlsym: answer those two names. */
void *dlsym(void *h, const char *name) {
  static void *(*real)(void *, const char *);
  if (!real) real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!real) real = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  void *p = real(h, name);
  if (p && name && h != RTLD_NEXT && !strcmp(name, "cuGetExportTable")) {
    real_get_export = p;
    return (void *)cuGetExportTable;
  }
  if (p && name && h != RTLD_NEXT && !strcmp(name, "cuGetProcAddress_v2")) {
    real_gpa = p;
    return (void *)cuGetProcAddress_v2;
  }
  if (name && h != RTLD_NEXT && strncmp(name, "cuda", 4) && strncmp(name, "nvrtc", 5)) {
    static int n;
    if (n++ < 40) fprintf(stderr, "EXPTRACE dlsym %s -> %p\n", name, p);
  }
  return p;
}
