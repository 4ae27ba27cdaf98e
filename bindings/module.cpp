// pybind11 module verishard._core: a sequence of ints in, a tuple of ints out, forwarded to
// the extracted core. Converts (refusing any integer outside [0, 2^62), where
// OCaml native ints stop agreeing with Coq naturals) and forwards; decides nothing.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>
#include "stubs.h"

namespace py = pybind11;

// The core computes with OCaml native ints, sound below 2^62 (max_int + 1).
static constexpr long long kCoreLimit = 1LL << 62;

// A Python int for an error message: its digits, shortened when long.
static std::string describe(PyObject *v) {
  PyObject *s = PyObject_Str(v);  // fails beyond Python's digit limit for str(int)
  if (s == nullptr) {
    PyErr_Clear();
    PyObject *bits = PyObject_CallMethod(v, "bit_length", nullptr);
    long long nb = bits ? PyLong_AsLongLong(bits) : -1;
    Py_XDECREF(bits);
    PyErr_Clear();
    return "of " + std::to_string(nb) + " bits";
  }
  Py_ssize_t n = 0;
  const char *c = PyUnicode_AsUTF8AndSize(s, &n);
  std::string text = c ? std::string(c, static_cast<size_t>(n)) : std::string("?");
  Py_DECREF(s);
  PyErr_Clear();
  if (text.size() > 40) text = text.substr(0, 20) + "... (" + std::to_string(text.size()) + " digits)";
  return text;
}

// Any sequence of Python ints, of any size: each must lie in [0, 2^62), else
// ValueError "integer N out of range for the verified core". A non-sequence
// or a non-integer element is a TypeError.
static std::vector<long> core_ints(const py::handle &seq) {
  py::object fast = py::reinterpret_steal<py::object>(
      PySequence_Fast(seq.ptr(), "the verified core takes a sequence of integers"));
  if (!fast) throw py::error_already_set();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject **items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<long> in;
  in.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; i++) {
    py::object v = py::reinterpret_steal<py::object>(PyNumber_Index(items[i]));
    if (!v) throw py::error_already_set();
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (overflow != 0 || x < 0 || x >= kCoreLimit)
      throw py::value_error("integer " + describe(v.ptr()) +
                            " out of range for the verified core (0 <= n < 2**62)");
    in.push_back(static_cast<long>(x));
  }
  return in;
}

// The answer as a tuple of Python ints (built here directly: no list to copy).
static py::tuple forward(const char *fname, const py::handle &seq) {
  std::vector<long> in = core_ints(seq);
  long *out = nullptr;
  size_t out_n = 0;
  char err[512] = {0};
  int rc = vs_call(fname, in.data(), in.size(), &out, &out_n, err, sizeof err);
  if (rc != 0) throw py::value_error(std::string(err));
  std::unique_ptr<long, void (*)(void *)> owned(out, std::free);
  py::tuple result(out_n);
  for (size_t i = 0; i < out_n; i++) {
    PyObject *x = PyLong_FromLong(out[i]);
    if (x == nullptr) throw py::error_already_set();
    PyTuple_SET_ITEM(result.ptr(), static_cast<Py_ssize_t>(i), x);
  }
  return result;
}

PYBIND11_MODULE(_core, m) {
  m.doc() = "The extracted, verified core of verishard (see coq/theories).";
  vs_init();
  m.def("check", [](py::object a) { return forward("vs_check", a); });
  m.def("plan", [](py::object a) { return forward("vs_plan", a); });
  m.def("eplan", [](py::object a) { return forward("vs_eplan", a); });
  m.def("echeck", [](py::object a) { return forward("vs_echeck", a); });
  m.def("ueplan", [](py::object a) { return forward("vs_ueplan", a); });
  m.def("uecheck", [](py::object a) { return forward("vs_uecheck", a); });
  m.def("pcheck", [](py::object a) { return forward("vs_pcheck", a); });
  m.def("pplan", [](py::object a) { return forward("vs_pplan", a); });
  m.def("ucheck", [](py::object a) { return forward("vs_ucheck", a); });
  m.def("uplan", [](py::object a) { return forward("vs_uplan", a); });
  m.def("umovement", [](py::object a) { return forward("vs_umovement", a); });
  m.def("lower_bound", [](py::object a) { return forward("vs_lower_bound", a); });
  m.def("certify", [](py::object a) { return forward("vs_certify", a); });
  m.def("ulower_bound", [](py::object a) { return forward("vs_ulower_bound", a); });
  m.def("xplan", [](py::object a) { return forward("vs_xplan", a); });
  m.def("xrounds", [](py::object a) { return forward("vs_xrounds", a); });
  m.def("wplan", [](py::object a) { return forward("vs_wplan", a); });
  m.def("xrank", [](py::object a) { return forward("vs_xrank", a); });
  m.def("rank_rounds", [](py::object a) { return forward("vs_rank_rounds", a); });
  m.def("bplan", [](py::object a) { return forward("vs_bplan", a); });
  m.def("bcovers", [](py::object a) { return forward("vs_bcovers", a); });
  m.def("lplan", [](py::object a) { return forward("vs_lplan", a); });
  m.def("synthesize", [](py::object a) { return forward("vs_synthesize", a); });
  m.def("blocks", [](py::object a) { return forward("vs_blocks", a); });
  m.def("permute", [](py::object a) { return forward("vs_permute", a); });
  m.def("movement", [](py::object a) { return forward("vs_movement", a); });
  m.def("mplan", [](py::object a) { return forward("vs_mplan", a); });
  m.def("pucheck", [](py::object a) { return forward("vs_pucheck", a); });
  m.def("puplan_checked", [](py::object a) { return forward("vs_puplan_checked", a); });
  // The core's own stack (bindings/stubs.c): bytes reserved, and a bound on
  // the deepest a call has gone (0 while none went below its top 8 MiB).
  m.def("stack_reserved", []() { return vs_stack_reserved(); });
  m.def("stack_peak", []() { return vs_stack_peak(); });
}
