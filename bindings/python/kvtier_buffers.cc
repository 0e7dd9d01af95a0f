// The argument conversions of the Python module (kvtier_module.h): BufferView, a borrowed view of
// a buffer-protocol or DLPack object, and the Tokens and LayoutArg type casters.
#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "kvtier/status.h"
#include "kvtier_module.h"

namespace kvtier::python {

// DLPack (v0.x, the "dltensor" capsule every framework exports): the C structs of the
// specification, declared here because Debian ships no dlpack header. Used for objects without the
// buffer protocol, such as torch tensors.
namespace dlpack {
struct Device {
  int32_t device_type;  // 1 = CPU, 3 = CUDA host (pinned) memory, 2 = CUDA, ...
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // In elements; nullptr: compact row-major.
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};
constexpr int32_t kCpu = 1;
constexpr int32_t kCudaHost = 3;
constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";
}  // namespace dlpack

BufferView::BufferView(py::handle object, bool writable, const std::string& what) {
  if (PyObject_CheckBuffer(object.ptr()) == 0 && py::hasattr(object, "__dlpack__")) {
    FromDlpack(object, what);
    return;
  }
  const int flags = PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
    PyErr_Clear();
    const bool readable = writable && PyObject_CheckBuffer(object.ptr()) != 0;
    throw StatusError(Status::InvalidArgument(
        what + (readable ? " is read-only; a load destination must be writable"
                         : " supports neither the buffer protocol nor DLPack (" +
                               std::string(Py_TYPE(object.ptr())->tp_name) + ")")));
  }
  held_ = true;
  data_ = static_cast<std::byte*>(view_.buf);
  size_ = static_cast<size_t>(view_.len);
  if (PyBuffer_IsContiguous(&view_, 'C') == 0) {
    Release();
    throw StatusError(Status::InvalidArgument(what + " is not C-contiguous"));
  }
}

void BufferView::FromDlpack(py::handle object, const std::string& what) {
  const py::object capsule = object.attr("__dlpack__")();
  auto* managed = static_cast<dlpack::ManagedTensor*>(
      PyCapsule_GetPointer(capsule.ptr(), dlpack::kCapsuleName));
  if (managed == nullptr) {
    PyErr_Clear();
    throw StatusError(Status::InvalidArgument(what + ": __dlpack__ returned no dltensor"));
  }
  if (PyCapsule_SetName(capsule.ptr(), dlpack::kUsedCapsuleName) != 0) {
    throw py::error_already_set();
  }
  managed_ = managed;
  const dlpack::Tensor& t = managed->dl_tensor;
  if (t.device.device_type != dlpack::kCpu && t.device.device_type != dlpack::kCudaHost) {
    Release();
    throw StatusError(Status::InvalidArgument(what + " lives on DLPack device type " +
                                              std::to_string(t.device.device_type) +
                                              "; this build reads and writes host memory only"));
  }
  uint64_t elements = 1;
  int64_t expected_stride = 1;
  bool contiguous = true;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    const int64_t extent = t.shape[d];
    if (t.strides != nullptr && extent > 1 && t.strides[d] != expected_stride) {
      contiguous = false;
    }
    expected_stride *= extent;
    elements *= static_cast<uint64_t>(extent);
  }
  if (!contiguous) {
    Release();
    throw StatusError(Status::InvalidArgument(what + " is not C-contiguous"));
  }
  const uint64_t element_bits = uint64_t{t.dtype.bits} * t.dtype.lanes;
  data_ = static_cast<std::byte*>(t.data) + t.byte_offset;
  size_ = static_cast<size_t>(elements * element_bits / 8);
}

void BufferView::Take(BufferView& other) {
  view_ = other.view_;
  held_ = other.held_;
  managed_ = other.managed_;
  data_ = other.data_;
  size_ = other.size_;
  other.held_ = false;
  other.managed_ = nullptr;
}

void BufferView::Release() {
  if (held_) PyBuffer_Release(&view_);
  held_ = false;
  if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
  managed_ = nullptr;
}

}  // namespace kvtier::python

namespace pybind11::detail {

bool type_caster<kvtier::python::Tokens>::load(handle src, bool /*convert*/) {
  using kvtier::Status;
  using kvtier::python::StatusError;
  if (PyObject_CheckBuffer(src.ptr()) != 0) {
    Py_buffer view;
    if (PyObject_GetBuffer(src.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      throw StatusError(Status::InvalidArgument("tokens must be a C-contiguous buffer"));
    }
    const bool ok = LoadBuffer(view);
    PyBuffer_Release(&view);
    if (!ok) {
      throw StatusError(Status::InvalidArgument(
          "tokens must be integers in [0, 2^32) (an integer array or a sequence of int)"));
    }
    return true;
  }
  if (PySequence_Check(src.ptr()) == 0 || PyUnicode_Check(src.ptr()) != 0) return false;
  const sequence seq = reinterpret_borrow<sequence>(src);
  value.values.reserve(seq.size());
  for (size_t i = 0; i < seq.size(); ++i) {
    const object item = seq[i];
    // Any integer-like item (int, numpy integer scalars): operator.index semantics.
    const object index = reinterpret_steal<object>(PyNumber_Index(item.ptr()));
    int overflow = 0;
    const long long v = index ? PyLong_AsLongLongAndOverflow(index.ptr(), &overflow) : -1;
    if (PyErr_Occurred() != nullptr) PyErr_Clear();
    if (!index || overflow != 0 || v < 0 || v > 0xffffffffLL) {
      throw StatusError(Status::InvalidArgument("tokens[" + std::to_string(i) +
                                                "] is not an integer in [0, 2^32)"));
    }
    value.values.push_back(static_cast<uint32_t>(v));
  }
  return true;
}

template <typename T>
bool type_caster<kvtier::python::Tokens>::Convert(const Py_buffer& view) {
  const size_t n = static_cast<size_t>(view.len) / sizeof(T);
  const auto* items = static_cast<const T*>(view.buf);
  value.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    T item;
    std::memcpy(&item, items + i, sizeof(T));  // Buffers need not be aligned.
    if constexpr (std::is_signed_v<T>) {
      if (item < 0) return false;
    }
    if (static_cast<unsigned long long>(item) > 0xffffffffULL) return false;
    value.values[i] = static_cast<uint32_t>(static_cast<unsigned long long>(item));
  }
  return true;
}

bool type_caster<kvtier::python::Tokens>::LoadBuffer(const Py_buffer& view) {
  std::string format = view.format != nullptr ? view.format : "B";
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
    format.erase(0, 1);
  }
  if (format.size() != 1) return false;
  const auto size = static_cast<size_t>(view.itemsize);
  switch (format[0]) {
    case 'B':
      return size == 1 && Convert<uint8_t>(view);
    case 'H':
      return size == 2 && Convert<uint16_t>(view);
    case 'I':
    case 'L':
      if (size == 4 && view.len % 4 == 0) {
        value.values.resize(static_cast<size_t>(view.len) / 4);
        std::memcpy(value.values.data(), view.buf, static_cast<size_t>(view.len));
        return true;
      }
      return size == 8 && Convert<uint64_t>(view);
    case 'Q':
      return size == 8 && Convert<uint64_t>(view);
    case 'b':
      return size == 1 && Convert<int8_t>(view);
    case 'h':
      return size == 2 && Convert<int16_t>(view);
    case 'i':
    case 'l':
    case 'q':
      return size == 4 ? Convert<int32_t>(view) : size == 8 && Convert<int64_t>(view);
    default:
      return false;
  }
}

bool type_caster<kvtier::python::LayoutArg>::load(handle src, bool /*convert*/) {
  if (PyUnicode_Check(src.ptr()) != 0) {
    value.text = src.cast<std::string>();
    return true;
  }
  if (PyDict_Check(src.ptr()) == 0) return false;
  std::string text;
  for (const auto& [key, item] : reinterpret_borrow<dict>(src)) {
    if (!text.empty()) text += ',';
    text += str(key).cast<std::string>() + "=" + str(item).cast<std::string>();
  }
  value.text = std::move(text);
  return true;
}

}  // namespace pybind11::detail
