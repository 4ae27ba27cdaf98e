#ifndef VERISHARD_STUBS_H
#define VERISHARD_STUBS_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
/* Start the OCaml runtime (idempotent). */
void vs_init(void);
/* Call registered core function [fname] on ints [in]; on success (0) [*out]
   is a malloc'd array of [*out_n] ints; otherwise [err] holds the reason. */
int vs_call(const char *fname, const long *in, size_t n, long **out, size_t *out_n,
            char *err, size_t err_cap);
/* Bytes of address space reserved for the core's stack (0 before the first
   call, or where none could be reserved), and a bound on the deepest any call
   has gone into it beyond its top 8 MiB (0 if none went that deep). */
size_t vs_stack_reserved(void);
size_t vs_stack_peak(void);
#ifdef __cplusplus
}
#endif
#endif
