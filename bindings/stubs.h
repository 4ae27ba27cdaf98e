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
#ifdef __cplusplus
}
#endif
#endif
