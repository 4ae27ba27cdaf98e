// pybind11 module verishard._core: list[int] in, list[int] out, forwarded to
// the extracted core. Converts and forwards; decides nothing.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <cstdlib>
#include <string>
#include <vector>
#include "stubs.h"

namespace py = pybind11;

static std::vector<long> forward(const char *fname, const std::vector<long> &in) {
  for (long x : in)
    if (x < 0) throw py::value_error("the verified core takes non-negative integers only");
  long *out = nullptr;
  size_t out_n = 0;
  char err[512] = {0};
  int rc = vs_call(fname, in.data(), in.size(), &out, &out_n, err, sizeof err);
  if (rc != 0) throw py::value_error(std::string(err));
  std::vector<long> result(out, out + out_n);
  std::free(out);
  return result;
}

PYBIND11_MODULE(_core, m) {
  m.doc() = "The extracted, verified core of verishard (see coq/theories).";
  vs_init();
  m.def("check", [](const std::vector<long> &a) { return forward("vs_check", a); });
  m.def("plan", [](const std::vector<long> &a) { return forward("vs_plan", a); });
  m.def("synthesize", [](const std::vector<long> &a) { return forward("vs_synthesize", a); });
  m.def("blocks", [](const std::vector<long> &a) { return forward("vs_blocks", a); });
  m.def("permute", [](const std::vector<long> &a) { return forward("vs_permute", a); });
  m.def("movement", [](const std::vector<long> &a) { return forward("vs_movement", a); });
}
