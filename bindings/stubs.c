/* C ABI over the OCaml runtime that holds the extracted core.
   The runtime is started once; OCaml exceptions come back as messages
   (the glue's Core_error as its bare message).

   Every call runs on a stack of its own (vs_call below): the extracted code
   recurses along lists as long as the mesh has devices, deeper than the
   8 MiB of a main thread at 2^18 devices and than the 1 MiB many servers
   give their threads at 2^14, and OCaml 4.13 turns a stack overflow into an
   exception on the main thread only (elsewhere the process dies). The
   calling thread switches to that stack and back: no other
   thread, no copy. Calls are serialised by a mutex (Python already holds
   the GIL across them), so one stack serves every thread. */
#define _GNU_SOURCE
#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/callback.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/printexc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <ucontext.h>
#include <time.h>
#include <unistd.h>
#include "stubs.h"

static int vs_started = 0;

/* --- what the process may still allocate ---------------------------------
   The glue (bindings/glue.ml, [room]) asks, as the core's heap grows, how
   many more bytes the process can obtain: the least of what its
   address-space limit leaves (RLIMIT_AS less the mapped size, which counts
   the core's stack reservation), what the machine has available
   (MemAvailable: past it the kernel kills the process) and what its memory
   cgroup leaves (v2 or v1). An OCaml heap that cannot grow aborts the
   process ("Fatal error: out of memory"); the glue stops the call first. */
static long vs_read_long(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char line[256];
  long v = -1;
  size_t k = key ? strlen(key) : 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (key == NULL || strncmp(line, key, k) == 0) {
      char *p = line + k, *end;
      long x = strtol(p, &end, 10);
      if (end != p) v = x;   /* "max" (no cgroup limit) reads as none */
      break;
    }
  }
  fclose(f);
  return v;
}

static long vs_least(long a, long b) { return a < 0 ? b : (b < 0 ? a : (a < b ? a : b)); }

value vs_room(value unit) {
  (void)unit;
  long page = sysconf(_SC_PAGESIZE);
  long room = -1;   /* -1: no limit known */
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    long mapped = vs_read_long("/proc/self/statm", NULL);
    if (mapped >= 0) {
      long left = (long)rl.rlim_cur - mapped * page;
      room = vs_least(room, left < 0 ? 0 : left);
    }
  }
  long avail_kb = vs_read_long("/proc/meminfo", "MemAvailable:");
  if (avail_kb >= 0) room = vs_least(room, avail_kb * 1024);
  long cg_max = vs_read_long("/sys/fs/cgroup/memory.max", NULL);
  long cg_cur = vs_read_long("/sys/fs/cgroup/memory.current", NULL);
  if (cg_max < 0) {
    cg_max = vs_read_long("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL);
    cg_cur = vs_read_long("/sys/fs/cgroup/memory/memory.usage_in_bytes", NULL);
  }
  if (cg_max > 0 && cg_cur >= 0 && cg_max < ((long)1 << 60)) {
    long left = cg_max - cg_cur;
    room = vs_least(room, left < 0 ? 0 : left);
  }
  return Val_long(room < 0 ? Max_long : room);
}

void vs_init(void) {
  if (vs_started) return;
  static char *argv[] = {"verishard", NULL};
  caml_startup(argv);
  vs_started = 1;
}

static int vs_call_here(const char *fname, const long *in, size_t n, long **out, size_t *out_n,
                        char *err, size_t err_cap) {
  CAMLparam0();
  CAMLlocal3(arr, res, exn);
  const value *f = caml_named_value(fname);
  *out = NULL;
  *out_n = 0;
  if (f == NULL) {
    snprintf(err, err_cap, "the verified core has no function %s", fname);
    CAMLreturnT(int, 2);
  }
  if (n == 0) {
    arr = Atom(0);
  } else {
    arr = caml_alloc(n, 0);
    for (size_t i = 0; i < n; i++) Store_field(arr, i, Val_long(in[i]));
  }
  res = caml_callback_exn(*f, arr);
  if (Is_exception_result(res)) {
    exn = Extract_exception(res);
    const value *core_error = caml_named_value("vs_error");
    if (core_error != NULL && Tag_val(exn) == 0 && Wosize_val(exn) == 2 && Field(exn, 0) == *core_error) {
      snprintf(err, err_cap, "%s", String_val(Field(exn, 1)));   /* the glue's own message */
    } else {
      char *msg = caml_format_exception(exn);
      snprintf(err, err_cap, "%s", msg ? msg : "exception in the verified core");
      free(msg);
    }
    CAMLreturnT(int, 1);
  }
  size_t m = Wosize_val(res);
  long *buf = (long *)malloc((m ? m : 1) * sizeof(long));
  if (buf == NULL) {
    snprintf(err, err_cap, "out of memory");
    CAMLreturnT(int, 3);
  }
  for (size_t i = 0; i < m; i++) buf[i] = Long_val(Field(res, i));
  *out = buf;
  *out_n = m;
  CAMLreturnT(int, 0);
}

/* --- the core's own stack ------------------------------------------------
   Reserved once, VS_STACK_BYTES of address space (pages are only backed
   once touched; MAP_NORESERVE: not counted against the commit limit), with
   an inaccessible guard at its low end. Deep calls leave touched pages
   behind: after a call that went below the top VS_KEEP_BYTES they are given
   back (madvise), so a process keeps at most that much of it resident. */
#define VS_STACK_BYTES ((size_t)4 << 30)
#define VS_GUARD_BYTES ((size_t)1 << 20)
#define VS_KEEP_BYTES ((size_t)8 << 20)

struct vs_args {
  const char *fname;
  const long *in;
  size_t n;
  long **out;
  size_t *out_n;
  char *err;
  size_t err_cap;
  int rc;
};

static pthread_mutex_t vs_lock = PTHREAD_MUTEX_INITIALIZER;
static char *vs_stack = NULL;      /* low end of the mapping (the guard) */
static size_t vs_stack_bytes = 0;
static int vs_stack_failed = 0;    /* no mapping could be made: call in place */
static struct vs_args *vs_pending = NULL;
static size_t vs_deepest = 0;      /* bytes of the core stack touched, at most (vs_stack_peak) */

static void vs_run_pending(void) {
  struct vs_args *a = vs_pending;
  a->rc = vs_call_here(a->fname, a->in, a->n, a->out, a->out_n, a->err, a->err_cap);
}

#if defined(__x86_64__)
/* Call [fn] with the stack pointer at [top] (16-byte aligned), then come
   back to this stack: the few instructions swapcontext would spend two
   signal-mask system calls around. */
static void vs_switch(void) {
  char *top = vs_stack + vs_stack_bytes;
  void (*fn)(void) = vs_run_pending;
  __asm__ volatile(
      "movq %%rsp, %%rbx\n\t"
      "movq %0, %%rsp\n\t"
      "callq *%1\n\t"
      "movq %%rbx, %%rsp\n\t"
      :
      : "r"(top), "r"(fn)
      : "rbx", "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "xmm0", "xmm1",
        "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
        "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
}
static int vs_switch_ready(void) { return 1; }
#else
static ucontext_t vs_caller, vs_core;
static void vs_loop(void) {  /* the core's side: each pending call, then back */
  for (;;) {
    vs_run_pending();
    swapcontext(&vs_core, &vs_caller);
  }
}
static int vs_switch_ready(void) {
  if (getcontext(&vs_core) != 0) return 0;
  vs_core.uc_stack.ss_sp = vs_stack;
  vs_core.uc_stack.ss_size = vs_stack_bytes;
  vs_core.uc_link = NULL;
  makecontext(&vs_core, vs_loop, 0);
  return 1;
}
static void vs_switch(void) { swapcontext(&vs_caller, &vs_core); }
#endif

static int vs_stack_ready(void) {
  if (vs_stack != NULL) return 1;
  if (vs_stack_failed) return 0;
  /* a smaller reservation where the address space or the commit policy refuses 4 GiB */
  for (size_t bytes = VS_STACK_BYTES; bytes >= ((size_t)256 << 20); bytes /= 2) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) continue;
    vs_stack = (char *)p;
    vs_stack_bytes = bytes;
    if (mprotect(p, VS_GUARD_BYTES, PROT_NONE) != 0 || !vs_switch_ready()) {
      munmap(p, bytes);
      vs_stack = NULL;
      vs_stack_bytes = 0;
      break;
    }
    return 1;
  }
  vs_stack_failed = 1;
  return 0;
}

/* Bytes below the top of the core stack holding resident pages, scanning
   down from the top in steps of VS_KEEP_BYTES: where it stops is a bound
   (within one step) on how deep the last call went. */
static size_t vs_touched(void) {
  long page = sysconf(_SC_PAGESIZE);
  unsigned char resident;
  size_t depth = 0;
  for (size_t off = VS_KEEP_BYTES; off < vs_stack_bytes - VS_GUARD_BYTES; off += VS_KEEP_BYTES) {
    char *probe = vs_stack + vs_stack_bytes - off;
    if (mincore((void *)((uintptr_t)probe & ~(uintptr_t)(page - 1)), (size_t)page, &resident) != 0 ||
        !(resident & 1))
      break;
    depth = off;
  }
  return depth;
}

int vs_call(const char *fname, const long *in, size_t n, long **out, size_t *out_n,
            char *err, size_t err_cap) {
  pthread_mutex_lock(&vs_lock);
  int rc;
  if (!vs_stack_ready()) {
    rc = vs_call_here(fname, in, n, out, out_n, err, err_cap);
  } else {
    struct vs_args a = {fname, in, n, out, out_n, err, err_cap, 0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    vs_pending = &a;
    vs_switch();
    vs_pending = NULL;
    rc = a.rc;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* Only a long call can have gone deep (touching VS_KEEP_BYTES of fresh
       stack alone takes over a millisecond): probing costs a system call
       (about 1 us), so short calls skip it; pages a short call left behind
       go back after the next long one. */
    long us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
    size_t depth = us >= 200 ? vs_touched() : 0;
    if (depth > 0) {   /* went below the top VS_KEEP_BYTES: give the pages back */
      if (depth + VS_KEEP_BYTES > vs_deepest) vs_deepest = depth + VS_KEEP_BYTES;
      madvise(vs_stack + VS_GUARD_BYTES, vs_stack_bytes - VS_GUARD_BYTES - VS_KEEP_BYTES, MADV_DONTNEED);
    }
  }
  pthread_mutex_unlock(&vs_lock);
  return rc;
}

size_t vs_stack_reserved(void) { return vs_stack_bytes; }
size_t vs_stack_peak(void) { return vs_deepest; }
