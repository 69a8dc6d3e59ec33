// Tensor <-> NumPy without copies on the CPU.
//
// Tensor.numpy() returns an ndarray over the tensor's storage (a capsule holding a reference to
// the Storage keeps it alive). myriad.from_numpy(a) wraps the array's memory (the Storage's
// deleter holds a reference to the array, released under the GIL). bf16 / f16 tensors appear
// in NumPy as uint16 / float16 arrays of the same bits. Negative strides are refused.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "myriad/core/philox.h"

namespace py = pybind11;

namespace myriad::python {

namespace {

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return py::dtype::of<float>();
    case DType::bf16:
      return py::dtype::of<std::uint16_t>();
    case DType::f16:
      return py::dtype("float16");
    case DType::i32:
      return py::dtype::of<std::int32_t>();
    case DType::i64:
      return py::dtype::of<std::int64_t>();
    case DType::u16:
      return py::dtype::of<std::uint16_t>();
    case DType::i8:
      return py::dtype::of<std::int8_t>();
    case DType::f64:
      return py::dtype::of<double>();
  }
  MYRIAD_THROW("no NumPy dtype for " << dtype_name(dtype));
}

DType myriad_dtype(const py::dtype& dt) {
  if (dt.is(py::dtype::of<float>())) return DType::f32;
  if (dt.is(py::dtype("float16"))) return DType::f16;
  if (dt.is(py::dtype::of<std::int32_t>())) return DType::i32;
  if (dt.is(py::dtype::of<std::int64_t>())) return DType::i64;
  if (dt.is(py::dtype::of<std::uint16_t>())) return DType::u16;
  if (dt.is(py::dtype::of<std::int8_t>())) return DType::i8;
  MYRIAD_THROW("from_numpy: unsupported NumPy dtype " << std::string(py::str(dt))
                                                      << "; allowed: float32, float16, int32, int64, uint16, int8");
}

py::array to_numpy(const Tensor& t) {
  MYRIAD_CHECK(t.device().is_cpu(), "numpy(): tensor " << t.describe() << " is not on the CPU");
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides;
  auto itemsize = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  for (std::int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s) * itemsize);
  auto* keep = new std::shared_ptr<Storage>(t.storage());
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); });
  return py::array(numpy_dtype(t.dtype()), shape, strides, t.raw_data(), owner);
}

Tensor from_numpy(const py::array& array, const std::string& as_dtype) {
  DType dtype = myriad_dtype(array.dtype());
  if (!as_dtype.empty()) {
    DType wanted = parse_dtype(as_dtype);
    MYRIAD_CHECK(wanted == dtype || (wanted == DType::bf16 && dtype == DType::u16),
                 "from_numpy: array dtype " << dtype_name(dtype) << " cannot be viewed as " << as_dtype
                                            << " (only uint16 bits may be viewed as bf16)");
    dtype = wanted;
  }
  auto itemsize = static_cast<std::int64_t>(array.itemsize());
  Shape shape;
  Strides strides;
  std::int64_t span = 1;
  for (py::ssize_t d = 0; d < array.ndim(); ++d) {
    std::int64_t byte_stride = array.strides(d);
    MYRIAD_CHECK(
        byte_stride >= 0 && byte_stride % itemsize == 0,
        "from_numpy: stride " << byte_stride << " bytes of dim " << d
                              << " is negative or not a multiple of the item size; pass np.ascontiguousarray(a)");
    shape.push_back(array.shape(d));
    strides.push_back(byte_stride / itemsize);
    if (array.shape(d) == 0) span = 0;
  }
  if (span != 0) {
    for (std::size_t d = 0; d < shape.size(); ++d) span += (shape[d] - 1) * strides[d];
  }
  auto* keep = new py::object(array);
  auto storage = Storage::wrap(const_cast<void*>(array.data()), static_cast<std::size_t>(span * itemsize),
                               Device::cpu(), [keep](void*) {
                                 py::gil_scoped_acquire gil;
                                 delete keep;
                               });
  return Tensor::from_storage(storage, shape, strides, 0, dtype);
}

}  // namespace

Tensor output_or_new(const py::object& given, const Shape& shape, DType dtype) {
  if (given.is_none()) return Tensor::empty(shape, dtype);
  return given.cast<Tensor>();
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", py::buffer_protocol(), "Strided view of shared storage (CPU or CUDA)")
      .def_property_readonly("shape", [](const Tensor& t) { return t.shape(); })
      .def_property_readonly(
          "strides", [](const Tensor& t) { return t.strides(); }, "in elements")
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_property_readonly("device", [](const Tensor& t) { return t.device().str(); })
      .def_property_readonly("offset", &Tensor::offset)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nbytes", &Tensor::nbytes)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("numpy", &to_numpy, "NumPy array over the same memory (no copy)")
      .def(
          "__array__", [](const Tensor& t, const py::object&, const py::object&) { return to_numpy(t); },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("view", &Tensor::view)
      .def("reshape", &Tensor::reshape)
      .def("slice", &Tensor::slice, py::arg("dim"), py::arg("start"), py::arg("end"))
      .def("select", &Tensor::select)
      .def("transpose", &Tensor::transpose)
      .def("permute", &Tensor::permute)
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("to", [](const Tensor& t, const std::string& dtype) { return t.to(parse_dtype(dtype)); })
      .def("copy_from", &Tensor::copy_from)
      .def("fill", &Tensor::fill)
      .def("zero", &Tensor::zero)
      .def("same_storage", [](const Tensor& a, const Tensor& b) { return a.storage() == b.storage(); })
      .def("__repr__", [](const Tensor& t) { return "myriad.Tensor(" + t.describe() + ")"; });

  m.def("from_numpy", &from_numpy, py::arg("array"), py::arg("dtype") = "",
        "Tensor over the array's memory (no copy). dtype='bf16' views uint16 bits as bf16.");
  m.def(
      "empty", [](const Shape& shape, const std::string& dtype) { return Tensor::empty(shape, parse_dtype(dtype)); },
      py::arg("shape"), py::arg("dtype") = "f32");
  m.def(
      "zeros", [](const Shape& shape, const std::string& dtype) { return Tensor::zeros(shape, parse_dtype(dtype)); },
      py::arg("shape"), py::arg("dtype") = "f32");
  m.def(
      "full",
      [](const Shape& shape, double value, const std::string& dtype) {
        return Tensor::full(shape, value, parse_dtype(dtype));
      },
      py::arg("shape"), py::arg("value"), py::arg("dtype") = "f32");
  m.def(
      "randn",
      [](const Shape& shape, std::uint64_t seed, std::uint64_t stream, float std) {
        Tensor t = Tensor::empty(shape);
        fill_normal(t, 0.0f, std, seed, stream);
        return t;
      },
      py::arg("shape"), py::arg("seed"), py::arg("stream") = 0, py::arg("std") = 1.0f,
      "Normal values from the counter-based RNG: element i depends only on (seed, stream, i)");
  m.def("philox4x32", &philox4x32, py::arg("seed"), py::arg("stream"), py::arg("index"));
}

}  // namespace myriad::python
