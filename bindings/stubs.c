/* C ABI over the OCaml runtime that holds the extracted core.
   The runtime is started once; OCaml exceptions come back as messages
   (the glue's Core_error as its bare message). */
#define CAML_NAME_SPACE
#include <caml/alloc.h>
#include <caml/callback.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/printexc.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "stubs.h"

static int vs_started = 0;

void vs_init(void) {
  if (vs_started) return;
  static char *argv[] = {"verishard", NULL};
  caml_startup(argv);
  vs_started = 1;
}

int vs_call(const char *fname, const long *in, size_t n, long **out, size_t *out_n,
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
