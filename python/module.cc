// _dtrain: the compiled half of the Python package. run() executes a dtrain command in process
// with the GIL released (rank threads never touch Python except through the step callback,
// which takes the GIL); load_checkpoint() returns a checkpoint's tensors as NumPy arrays that
// view one buffer (no copy per tensor).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/checkpoint/checkpoint.h"
#include "dtrain/core/check.h"
#include "dtrain/core/version.h"
#include "embedded.h"

namespace py = pybind11;

namespace {

// Passes rank 0's steps and evaluations to Python callables. A callable that raises ends the
// run: the exception is kept for the caller and a dtrain error unwinds the ranks.
class PythonObserver : public dtrain::train::TrainObserver {
 public:
  PythonObserver(py::object on_step, py::object on_eval)
      : on_step_(std::move(on_step)), on_eval_(std::move(on_eval)) {}
  ~PythonObserver() override {
    py::gil_scoped_acquire gil;
    on_step_ = py::object();
    on_eval_ = py::object();
  }

  void on_step(const dtrain::train::StepRecord& r) override {
    if (on_step_.is_none()) return;
    call(on_step_, [&] {
      py::dict d;
      d["step"] = r.step;
      d["loss"] = r.stats.loss;
      d["lr"] = r.lr;
      d["grad_norm"] = r.stats.grad_norm;
      d["ms"] = r.step_ms;
      return d;
    });
  }
  void on_eval(const dtrain::train::EvalRecord& r) override {
    if (on_eval_.is_none()) return;
    call(on_eval_, [&] {
      py::dict d;
      d["step"] = r.step;
      d["val_loss"] = r.val_loss;
      return d;
    });
  }
  std::optional<py::error_already_set>& error() { return error_; }

 private:
  template <typename MakeArgument>
  void call(const py::object& fn, MakeArgument make) {
    py::gil_scoped_acquire gil;
    try {
      fn(make());
    } catch (py::error_already_set& e) {
      error_.emplace(std::move(e));
      throw std::runtime_error("the Python callback raised an exception");
    }
  }
  py::object on_step_, on_eval_;
  std::optional<py::error_already_set> error_;
};

py::tuple run(const std::vector<std::string>& args, py::object on_step, py::object on_eval) {
  PythonObserver observer(std::move(on_step), std::move(on_eval));
  dtrain::cli::EmbeddedHooks hooks;
  hooks.observer = &observer;
  dtrain::cli::EmbeddedResult r;
  {
    py::gil_scoped_release release;
    r = dtrain::cli::run_embedded(args, hooks);
  }
  if (observer.error()) throw std::move(*observer.error());
  return py::make_tuple(r.exit_code, r.output, r.error);
}

// {name: ndarray}: each array views the checkpoint's one parameter buffer, which the arrays keep
// alive between them.
py::dict load_checkpoint(const std::string& path) {
  auto loaded = std::make_unique<dtrain::checkpoint::LoadedCheckpoint>();
  {
    py::gil_scoped_release release;
    *loaded = dtrain::checkpoint::load_checkpoint(path, "load_checkpoint");
  }
  dtrain::checkpoint::LoadedCheckpoint* raw = loaded.release();
  py::capsule owner(raw,
                    [](void* p) { delete static_cast<dtrain::checkpoint::LoadedCheckpoint*>(p); });
  py::dict out;
  for (const dtrain::model::ParamTensor& t : raw->state.table.tensors()) {
    std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
    std::vector<py::ssize_t> strides(shape.size());
    py::ssize_t stride = sizeof(float);
    for (size_t i = shape.size(); i-- > 0;) {
      strides[i] = stride;
      stride *= shape[i];
    }
    py::array_t<float> a(shape, strides, raw->state.params.data() + t.offset, owner);
    a.attr("setflags")(py::arg("write") = false);
    out[py::str(t.name)] = a;
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_dtrain, m) {
  m.doc() = "dtrain's compiled core: in-process commands and checkpoint reading";
  // dtrain's errors are bad input (a flag, a file): ValueError, with dtrain's message.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const dtrain::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("version", [] { return std::string(dtrain::version()); });
  m.def("run", &run, py::arg("args"), py::arg("on_step") = py::none(),
        py::arg("on_eval") = py::none(),
        "Runs `dtrain ARGS...` in this process: (exit code, stdout, error message)");
  m.def("load_checkpoint", &load_checkpoint, py::arg("path"),
        "A checkpoint's parameters as {name: read-only float32 ndarray}");
}
