// ATen registrations: the minimal device kernels (allocation, copies, resize, set_, views) and
// the boxed fallback that applies the op support table and the numerics policy, then runs the
// op on the host and reports it to the simulator's trace hook.
#pragma once

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <pybind11/pybind11.h>

#include <atomic>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "runtime.h"

namespace py = pybind11;

namespace spyre::aten {

enum Status : int { kNative = 0, kFallback = 1, kUnsupported = 2 };

struct Policy {
  std::shared_mutex mutex;
  std::unordered_map<std::string, int> status;  // base op name -> Status
  int default_status = kFallback;
  std::string table_path = "spyre_stack/ops.yaml";
  std::string policy_name = "permissive";
  // numerics: per ScalarType, the dtype native compute rounds to (Undefined: exact) and whether
  // the dtype is computed on the host instead of the device.
  std::array<at::ScalarType, static_cast<size_t>(at::ScalarType::NumOptions)> round_to{};
  std::array<bool, static_cast<size_t>(at::ScalarType::NumOptions)> host_only{};
  bool warn_downcast = true;
  std::atomic<bool> warned{false};
  // The card's refusals (spyre_stack/device_model.yaml), pushed only under SPYRE_DEVICE_MODEL=card:
  // dtypes the card cannot hold, same-dtype copies between device tensors, resize_, and ops with
  // no device kernel (keys "base" or "base.overload").
  std::array<bool, static_cast<size_t>(at::ScalarType::NumOptions)> refused_dtype{};
  bool refuse_device_copy = false;
  bool refuse_resize = false;
  std::unordered_map<std::string, std::string> refused_ops;  // key -> the row's source
  std::string model_path = "spyre_stack/device_model.yaml";
  std::unordered_map<std::string, int64_t> native_count;
  std::unordered_map<std::string, int64_t> fallback_count;
  int64_t zero_copy_count = 0;  // ops run on host aliases without copying operands
  std::mutex count_mutex;
};

inline Policy& policy() {
  static Policy* p = [] {
    auto* q = new Policy();
    q->round_to.fill(at::ScalarType::Undefined);
    q->host_only.fill(false);
    q->refused_dtype.fill(false);
    return q;
  }();
  return *p;
}

// Trace hook (a Python callable) called after every device op while tracing is on.
inline std::atomic<bool> tracing{false};
// True while the fallback moves operands between the simulated device and the host: those
// copies are an artefact of the simulation, not device traffic, so they are not traced.
inline thread_local bool in_fallback = false;
inline py::object& trace_hook() {
  static py::object* h = new py::object();
  return *h;
}

inline std::string base_name(const std::string& full) {
  std::string n = full.rfind("aten::", 0) == 0 ? full.substr(6) : full;
  if (n.size() > 1 && n.back() == '_' && !(n.size() > 2 && n[n.size() - 2] == '_')) n.pop_back();
  return n;
}

// Table codes: status in the low bits, kRandomFlag when the op draws random numbers without a
// generator argument (dropout): it then runs with the device generator's state.
constexpr int kRandomFlag = 16;
// kExactFlag: the op selects input elements (amax, argmax...): it computes nothing, so a down-cast
// dtype is not rounded through its compute dtype.
constexpr int kExactFlag = 32;
// kIteratorFlag: a pointwise op (TensorIterator on the host): its written argument must not
// partially overlap an input, as upstream checks for devices without a special case.
constexpr int kIteratorFlag = 64;

inline int lookup_status(const std::string& base) {
  auto& p = policy();
  std::shared_lock<std::shared_mutex> lock(p.mutex);
  auto it = p.status.find(base);
  return it == p.status.end() ? p.default_status : it->second;
}

// A CPU tensor aliasing a device tensor's host-backed memory (with its conj / neg bits).
inline at::Tensor host_alias(const at::Tensor& t) {
  at::Tensor a = at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                               at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
  if (t.is_conj()) a = at::_conj(a);
  if (t.is_neg()) a = at::_neg_view(a);
  return a;
}

using Metas = py::list;

inline void add_meta(py::list& shapes, py::list& dtypes, const at::Tensor& t) {
  if (!t.defined()) return;
  shapes.append(py::cast(t.sizes().vec()));
  dtypes.append(py::cast(t.scalar_type()));
}

inline void emit(const std::string& name, const std::string& overload, const char* status,
                 const std::vector<at::Tensor>& ins, const std::vector<at::Tensor>& outs,
                 int device) {
  py::gil_scoped_acquire gil;
  py::object& hook = trace_hook();
  if (hook.is_none() || !hook) return;
  py::list in_shapes, in_dtypes, out_shapes, out_dtypes;
  for (const auto& t : ins) add_meta(in_shapes, in_dtypes, t);
  for (const auto& t : outs) add_meta(out_shapes, out_dtypes, t);
  try {
    hook(name, overload, status, in_shapes, in_dtypes, out_shapes, out_dtypes, device);
  } catch (py::error_already_set& e) {
    TORCH_CHECK(false, "spyre trace hook failed: ", e.what());
  }
}

// The card's refusals: the errors the real stack raises (messages as its public record shows).
inline void check_card_dtype(at::ScalarType dtype) {
  auto& p = policy();
  TORCH_CHECK(!p.refused_dtype[static_cast<size_t>(dtype)], "Spyre backend does not support dtype ",
              dtype, " (device model ", p.model_path, ", SPYRE_DEVICE_MODEL=card)");
}

// A refused dtype is refused when data is written into a device tensor of it: an empty
// allocation passes (torch-spyre's configs run float64 out= allocations as mandatory_success),
// a copy to the device, a fill or a computed result does not.
inline void check_card_written(const at::Tensor& t) {
  if (t.defined() && t.is_privateuseone() && t.numel() > 0) check_card_dtype(t.scalar_type());
}

// An op the card refuses still reports PyTorch's own argument errors first (shape and dtype
// checks run before a kernel is looked for: torch-spyre's test_indexing config passes
// NumpyTests::test_boolean_assignment_value_mismatch, a "shape mismatch" of an index_put_ whose
// valid form the card cannot run). `validate` runs the op on host copies for those errors.
template <typename Validate>
inline void check_card_op(const std::string& base, const c10::FunctionSchema& schema,
                          Validate validate) {
  auto& p = policy();
  if (p.refused_ops.empty()) return;
  const auto& ov = schema.overload_name();
  std::string row, value;
  {
    std::shared_lock<std::shared_mutex> lock(p.mutex);
    // "eq.Scalar" also names its out= form (structured kernels reach the device as eq.Scalar_out)
    const bool out_form = ov.size() > 4 && ov.compare(ov.size() - 4, 4, "_out") == 0;
    auto it = p.refused_ops.find(ov.empty() ? base : base + "." + ov);
    if (it == p.refused_ops.end() && out_form) {
      it = p.refused_ops.find(base + "." + ov.substr(0, ov.size() - 4));
    }
    if (it == p.refused_ops.end()) it = p.refused_ops.find(base);
    if (it == p.refused_ops.end()) return;
    row = it->first;
    value = it->second;
  }
  // value: "<error>|<source>"; error "in-device-copy" is the card's copy error, else no kernel
  const auto bar = value.find('|');
  const std::string error = value.substr(0, bar);
  const std::string source = bar == std::string::npos ? "" : value.substr(bar + 1);
  TORCH_CHECK(error != "in-device-copy", "Error: In-device copy not implemented (device model ",
              p.model_path, ", row '", row, "', ", source, "; SPYRE_DEVICE_MODEL=card)");
  validate();
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", schema.name(), ov.empty() ? "" : ".", ov,
                              "' with arguments from the 'spyre' backend: the Spyre card has no "
                              "kernel for it (device model ", p.model_path, ", row '", row,
                              "', ", source, "; SPYRE_DEVICE_MODEL=card)");
}

// ---------------------------------------------------------------- kernels
inline at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                      std::optional<at::Layout> layout,
                                      std::optional<at::Device> device,
                                      std::optional<bool> pin_memory,
                                      std::optional<at::MemoryFormat> memory_format) {
  auto dev = device.value_or(at::Device(at::kPrivateUse1, current_device()));
  c10::DeviceGuard guard(dev.has_index() ? dev : at::Device(at::kPrivateUse1, current_device()));
  TORCH_CHECK(!pin_memory.value_or(false), "spyre: only host tensors can be pinned");
  return at::detail::empty_generic(size, &device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

inline at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                                std::optional<at::ScalarType> dtype,
                                std::optional<at::Layout> layout,
                                std::optional<at::Device> device,
                                std::optional<bool> pin_memory) {
  auto dev = device.value_or(at::Device(at::kPrivateUse1, current_device()));
  c10::DeviceGuard guard(dev.has_index() ? dev : at::Device(at::kPrivateUse1, current_device()));
  TORCH_CHECK(!pin_memory.value_or(false), "spyre: only host tensors can be pinned");
  return at::detail::empty_strided_generic(size, stride, &device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

inline at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(!(policy().refuse_device_copy && !self.is_cpu() && !dst.is_cpu() &&
                self.scalar_type() == dst.scalar_type()),
              "Error: In-device copy not implemented (device model ", policy().model_path,
              ", SPYRE_DEVICE_MODEL=card)");
  if (self.numel() > 0) check_card_written(dst);
  if (self.numel() > 0 && dst.numel() > 0) {
    host_alias(dst).copy_(self.is_cpu() ? self : host_alias(self));
  }
  if (tracing.load() && !in_fallback) {
    const char* dir = self.is_cpu() ? "h2d" : (dst.is_cpu() ? "d2h" : "d2d");
    int device = self.is_cpu() ? dst.device().index() : self.device().index();
    emit("aten::_copy_from", dir, "native", {self}, {dst}, device);
  }
  return dst;
}

inline at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

inline const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                                 std::optional<at::MemoryFormat> memory_format) {
  // The fallback's own resizes emulate an op's out= semantics; a direct resize_ is refused.
  TORCH_CHECK_NOT_IMPLEMENTED(!(policy().refuse_resize && !in_fallback),
                              "Could not run 'aten::resize_' with arguments from the 'spyre' "
                              "backend (device model ", policy().model_path,
                              ", SPYRE_DEVICE_MODEL=card)");
  c10::DeviceGuard guard(self.device());
  // Grow the storage first so an out-of-memory error leaves the tensor's metadata untouched.
  int64_t numel = 1;
  for (auto d : size) numel *= d;
  auto needed = static_cast<size_t>((numel + self.storage_offset()) * self.dtype().itemsize());
  if (numel > 0 && self.storage().nbytes() < needed) resize_bytes(self.storage(), needed);
  return at::native::resize_(self, size, memory_format);
}

inline at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source,
                                             int64_t storage_offset, c10::IntArrayRef size,
                                             c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, storage_offset, size, stride);
}

inline at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  int64_t new_size = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return self.set_(source, 0, {new_size}, {});
}

inline at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &device_allocator(), true);
  return self.set_(storage, 0, {0}, {});
}


// Memory is freed when the last reference goes (no caching allocator), so nothing to record.
inline void record_stream(at::Tensor& self, c10::Stream stream) {}

// ---------------------------------------------------------------- numerics
inline bool is_mutable_arg(const c10::FunctionSchema& schema, size_t i) {
  const auto& ai = schema.arguments()[i].alias_info();
  return ai && ai->isWrite();
}

// Rounds a host tensor's values through `to` where they are. An expanded tensor (stride 0, as
// fill_ may write) holds each value once: that one is rounded (upstream allows the fill).
inline void round_host_in_place(at::Tensor a, at::ScalarType to) {
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (a.stride(d) == 0 && a.size(d) > 1) a = a.narrow(d, 0, 1);
  }
  a.copy_(a.to(to));
}

inline void round_in_place(const at::Tensor& t, at::ScalarType to) {
  if (!t.defined() || t.numel() == 0) return;
  round_host_in_place(host_alias(t), to);
}

inline at::Tensor rounded_copy(const at::Tensor& t, at::ScalarType to) {
  auto c = at::empty_like(t);
  if (t.numel() > 0) host_alias(c).copy_(host_alias(t).to(to));
  return c;
}

inline bool on_device(const at::Tensor& t) { return t.defined() && t.is_privateuseone(); }

// ---------------------------------------------------------------- fallback
inline void warn_downcast_once(at::ScalarType from, at::ScalarType to) {
  auto& pol = policy();
  if (pol.warn_downcast && !pol.warned.exchange(true)) {
    TORCH_WARN("spyre: ", from, " inputs are computed in ", to,
               " on the Spyre device (set SPYRE_SILENCE_DOWNCAST_WARNING=1 to silence)");
  }
}

inline at::ScalarType rounding_for(const at::Tensor& t) {
  return policy().round_to[static_cast<size_t>(t.scalar_type())];
}

// The zero-copy path runs the host kernel directly on host aliases of the device tensors (the
// simulated device memory is host memory). Written arguments get resizable aliases: if the kernel
// resizes one (out= of the wrong size), the result is copied back into the resized device tensor.
// It is not used when a device argument asks a kernel to allocate on the device, for written
// tensor lists, or for lists it does not know.
inline bool zero_copy_ok(const c10::FunctionSchema& schema, const torch::jit::Stack& stack,
                         size_t base_idx, size_t num_args) {
  if (schema.name() == "aten::_resize_output_") return false;
  bool any = false;
  for (size_t i = 0; i < num_args; ++i) {
    const auto& arg = schema.arguments()[i];
    const auto& iv = stack[base_idx + i];
    if (iv.isDevice()) {
      if (iv.toDevice().is_privateuseone()) return false;
    } else if (iv.isTensor()) {
      any = any || on_device(iv.toTensor());
    } else if (iv.isTensorList()) {
      for (const auto& t : iv.toTensorList()) {
        if (on_device(t)) {
          if (arg.is_out() || is_mutable_arg(schema, i)) return false;
          any = true;
        }
      }
    } else if (iv.isList()) {
      for (const auto& e : iv.toListRef()) {
        if (e.isTensor() && on_device(e.toTensor())) {
          if (!iv.isOptionalTensorList() || arg.is_out()) return false;
          any = true;
        }
      }
    }
  }
  return any;
}

struct AliasedArg {
  at::Tensor device;
  at::Tensor alias;
};

inline void no_delete(void*) {}

// A host alias whose storage may be resized by a host kernel: growing it moves the data to new
// host memory (the device memory is left alone and the caller copies the result back).
inline at::Tensor resizable_host_alias(const at::Tensor& t) {
  size_t nbytes = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.dtype().itemsize());
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes,
                       c10::DataPtr(t.data_ptr(), t.data_ptr(), &no_delete, at::kCPU),
                       c10::GetCPUAllocator(), /*resizable=*/true);
  at::Tensor a = at::empty({0}, at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
  a.set_(storage, 0, t.sizes(), t.strides());
  if (t.is_conj()) a = at::_conj(a);
  if (t.is_neg()) a = at::_neg_view(a);
  return a;
}

// Runs the host kernel on aliases; returns the device tensors written in place.
inline std::vector<at::Tensor> run_zero_copy(const c10::OperatorHandle& op,
                                             torch::jit::Stack* stack, size_t base_idx,
                                             size_t num_args, bool native, int device) {
  const auto& schema = op.schema();
  std::vector<AliasedArg> aliased;
  std::vector<at::Tensor> mutated;
  auto to_host = [&](const at::Tensor& t, bool mut) -> at::Tensor {
    if (!on_device(t)) return t;
    at::Tensor alias = mut ? resizable_host_alias(t) : host_alias(t);
    aliased.push_back({t, alias});
    auto to = native ? rounding_for(t) : at::ScalarType::Undefined;
    if (mut) mutated.push_back(t);
    if (to == at::ScalarType::Undefined) return alias;
    warn_downcast_once(t.scalar_type(), to);
    if (mut) {
      if (alias.numel() > 0) round_host_in_place(alias, to);
      return alias;
    }
    return alias.to(to).to(t.scalar_type());
  };
  for (size_t i = 0; i < num_args; ++i) {
    auto& iv = (*stack)[base_idx + i];
    const bool mut = is_mutable_arg(schema, i);
    if (iv.isTensor()) {
      iv = to_host(iv.toTensor(), mut);
    } else if (iv.isTensorList()) {
      auto list = iv.toTensorList();
      c10::List<at::Tensor> host;
      for (const auto& t : list) host.push_back(to_host(t, false));
      iv = host;
    } else if (iv.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> host;
      for (const auto& e : iv.toListRef()) {
        host.push_back(e.isTensor() ? std::optional<at::Tensor>(to_host(e.toTensor(), false))
                                    : std::nullopt);
      }
      iv = host;
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);

  // Written arguments the kernel resized (or re-strided): resize the device tensor and copy.
  for (const auto& a : aliased) {
    bool written = false;
    for (const auto& m : mutated) written = written || m.is_same(a.device);
    if (!written) continue;
    const auto& d = a.device;
    bool moved = a.alias.numel() > 0 && a.alias.data_ptr() != d.data_ptr();
    if (!moved) {
      // written in place: adopt the shape the kernel gave the alias (same memory)
      if (a.alias.sizes() != d.sizes() || a.alias.strides() != d.strides()) {
        d.as_strided_(a.alias.sizes(), a.alias.strides(), d.storage_offset());
      }
      continue;
    }
    d.resize_(a.alias.sizes());
    host_alias(d).copy_(a.alias);
  }

  auto to_device = [&](const at::Tensor& r) -> at::Tensor {
    if (!r.defined() || !r.is_cpu()) return r;
    for (const auto& a : aliased) {
      if (r.is_same(a.alias)) return a.device;
    }
    for (const auto& a : aliased) {
      if (r.storage().is_alias_of(a.alias.storage()) && r.scalar_type() == a.device.scalar_type()) {
        return a.device.as_strided(r.sizes(), r.strides(),
                                   a.device.storage_offset() + r.storage_offset());
      }
    }
    c10::DeviceGuard guard(at::Device(at::kPrivateUse1, static_cast<c10::DeviceIndex>(device)));
    bool dense = r.is_non_overlapping_and_dense();
    at::Tensor out = dense ? at::empty_strided(r.sizes(), r.strides(),
                                               r.options().device(at::kPrivateUse1))
                           : at::empty(r.sizes(), r.options().device(at::kPrivateUse1));
    if (r.numel() > 0) {
      auto to = native ? rounding_for(r) : at::ScalarType::Undefined;
      host_alias(out).copy_(to == at::ScalarType::Undefined ? r : r.to(to));
    }
    return out;
  };
  const size_t num_returns = schema.returns().size();
  const size_t ret_idx = stack->size() - num_returns;
  for (size_t i = 0; i < num_returns; ++i) {
    auto& iv = (*stack)[ret_idx + i];
    if (iv.isTensor()) {
      iv = to_device(iv.toTensor());
    } else if (iv.isTensorList()) {
      c10::List<at::Tensor> dev;
      for (const auto& t : iv.toTensorList()) dev.push_back(to_device(t));
      iv = dev;
    }
  }
  for (const auto& m : mutated) {
    auto to = native ? rounding_for(m) : at::ScalarType::Undefined;
    if (to != at::ScalarType::Undefined) round_in_place(m, to);
  }
  return mutated;
}

// Upstream's TensorIterator refuses an output that partially overlaps an input; the fallback's
// rounded copies and separate host aliases would hide the overlap, so it is checked here, on the
// device tensors (which share their storage), with upstream's message.
inline void check_partial_overlap(const c10::FunctionSchema& schema,
                                  const torch::jit::Stack& stack, size_t base_idx,
                                  size_t num_args) {
  std::vector<at::Tensor> written, read;
  for (size_t i = 0; i < num_args; ++i) {
    const auto& iv = stack[base_idx + i];
    if (!iv.isTensor() || !on_device(iv.toTensor())) continue;
    (is_mutable_arg(schema, i) ? written : read).push_back(iv.toTensor());
  }
  for (const auto& w : written) {
    for (const auto& r : read) {
      TORCH_CHECK(at::get_overlap_status(w, r) != at::MemOverlapStatus::Partial,
                  "unsupported operation: some elements of the input tensor and the written-to "
                  "tensor refer to a single memory location. Please clone() the tensor before "
                  "performing the operation.");
    }
  }
}

// Runs an op on host copies of its device arguments (nothing on the device changes): only for
// the errors PyTorch's own checks raise.
inline void validate_on_host(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  torch::jit::Stack copy(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
  auto host = [](const at::Tensor& t) { return on_device(t) ? host_alias(t).clone() : t; };
  for (auto& iv : copy) {
    if (iv.isTensor()) {
      iv = host(iv.toTensor());
    } else if (iv.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const auto& t : iv.toTensorList()) list.push_back(host(t));
      iv = list;
    } else if (iv.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const auto& e : iv.toListRef()) {
        list.push_back(e.isTensor() ? std::optional<at::Tensor>(host(e.toTensor())) : std::nullopt);
      }
      iv = list;
    } else if (iv.isDevice() && iv.toDevice().is_privateuseone()) {
      iv = c10::IValue(at::Device(at::kCPU));
    }
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &copy);
}

inline void spyre_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const std::string name = schema.name();
  const std::string base = base_name(name);
  auto& pol = policy();
  check_card_op(base, schema, [&] { validate_on_host(op, *stack); });
  int code = lookup_status(base);
  const bool implicit_random = (code & kRandomFlag) != 0;
  const bool exact = (code & kExactFlag) != 0;
  int status = code & (kRandomFlag - 1);
  if (status == kUnsupported) {
    const auto& ov = schema.overload_name();
    TORCH_CHECK_NOT_IMPLEMENTED(false, "spyre: ", name, ov.empty() ? "" : ".", ov,
                                " is unsupported on the Spyre device (op support table ",
                                pol.table_path, ", entry '", base, "', policy ", pol.policy_name,
                                ")");
  }
  const size_t num_args = schema.arguments().size();
  const size_t base_idx = stack->size() - num_args;
  const bool trace = tracing.load();

  // Gather device inputs; dtypes that the numerics table keeps on the host demote the op.
  std::vector<at::Tensor> ins;
  int device = -1;
  for (size_t i = 0; i < num_args; ++i) {
    auto& iv = (*stack)[base_idx + i];
    const bool mut = is_mutable_arg(schema, i);
    auto visit = [&](const at::Tensor& t) {
      if (!on_device(t)) return;
      if (device < 0) device = t.device().index();
      if (pol.host_only[static_cast<size_t>(t.scalar_type())]) status = kFallback;
      if (trace && !mut) ins.push_back(t);  // written arguments are reported as outputs
    };
    if (iv.isTensor()) {
      visit(iv.toTensor());
    } else if (iv.isTensorList()) {
      for (const auto& t : iv.toTensorList()) visit(t);
    } else if (iv.isOptionalTensorList()) {
      for (const auto& e : iv.toListRef()) {
        if (e.isTensor()) visit(e.toTensor());
      }
    }
  }
  if (device < 0) device = current_device();
  const bool native = status == kNative;
  const bool rounds = native && !exact;  // native compute reads and writes through fp16
  if ((code & kIteratorFlag) != 0) check_partial_overlap(schema, *stack, base_idx, num_args);
  const bool zero_copy = zero_copy_ok(schema, *stack, base_idx, num_args);

  // Native ops compute in device precision: inputs are read through the rounding dtype.
  std::vector<at::Tensor> mutated;
  if (!zero_copy) {
    for (size_t i = 0; i < num_args; ++i) {
      auto& iv = (*stack)[base_idx + i];
      bool mut = is_mutable_arg(schema, i);
      if (iv.isTensor()) {
        const auto& t = iv.toTensor();
        if (!on_device(t)) continue;
        if (mut) mutated.push_back(t);
        auto to = rounds ? rounding_for(t) : at::ScalarType::Undefined;
        if (to == at::ScalarType::Undefined) continue;
        warn_downcast_once(t.scalar_type(), to);
        if (mut) {
          round_in_place(t, to);
        } else {
          iv = rounded_copy(t, to);
        }
      } else if (iv.isTensorList() && !mut && rounds) {
        auto list = iv.toTensorList();
        bool any = false;
        for (size_t j = 0; j < list.size(); ++j) {
          at::Tensor t = list.get(j);
          if (!on_device(t)) continue;
          auto to = rounding_for(t);
          if (to == at::ScalarType::Undefined) continue;
          list.set(j, rounded_copy(t, to));
          any = true;
        }
        if (any) iv = list;
      }
    }
  }

  // Random ops draw from the spyre generator: run them with a CPU generator carrying its state.
  std::vector<std::pair<at::Generator, at::Generator>> swapped;
  for (size_t i = 0; i < num_args; ++i) {
    const auto& type = schema.arguments()[i].type();
    bool is_gen = type->kind() == c10::TypeKind::GeneratorType ||
        (type->kind() == c10::TypeKind::OptionalType &&
         type->containedType(0)->kind() == c10::TypeKind::GeneratorType);
    if (!is_gen) continue;
    auto& iv = (*stack)[base_idx + i];
    at::Generator dev_gen;
    if (iv.isNone()) {
      dev_gen = default_generator(static_cast<c10::DeviceIndex>(device));
    } else {
      dev_gen = iv.toGenerator();
      if (dev_gen.device().type() != c10::DeviceType::PrivateUse1) continue;
    }
    at::Generator host_gen = at::make_generator<at::CPUGeneratorImpl>();
    {
      std::lock_guard<std::mutex> lock(dev_gen.mutex());
      host_gen.set_state(dev_gen.get_state());
    }
    iv = c10::IValue(host_gen);
    swapped.emplace_back(dev_gen, host_gen);
  }

  {
    std::lock_guard<std::mutex> lock(pol.count_mutex);
    (native ? pol.native_count : pol.fallback_count)[base] += 1;
    if (zero_copy) pol.zero_copy_count += 1;
  }

  // Ops that draw from the global generator: lend the host's default generator the device
  // generator's state for the duration of the op, then take it back.
  at::Generator lent;
  at::Tensor saved_host_state;
  if (implicit_random && swapped.empty()) {
    lent = default_generator(static_cast<c10::DeviceIndex>(device));
    auto host = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock_host(host.mutex());
    std::lock_guard<std::mutex> lock_dev(lent.mutex());
    saved_host_state = host.get_state();
    host.set_state(lent.get_state());
  }
  auto give_back = [&] {
    if (!lent.defined()) return;
    auto host = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock_host(host.mutex());
    std::lock_guard<std::mutex> lock_dev(lent.mutex());
    lent.set_state(host.get_state());
    host.set_state(saved_host_state);
  };

  in_fallback = true;
  try {
    if (zero_copy) {
      mutated = run_zero_copy(op, stack, base_idx, num_args, rounds, device);
    } else {
      at::native::cpu_fallback(op, stack);
    }
  } catch (...) {
    in_fallback = false;
    give_back();
    throw;
  }
  in_fallback = false;
  give_back();

  for (auto& [dev_gen, host_gen] : swapped) {
    std::lock_guard<std::mutex> lock(dev_gen.mutex());
    dev_gen.set_state(host_gen.get_state());
  }

  // Outputs: results left on the stack plus mutated arguments.
  std::vector<at::Tensor> outs;
  const size_t num_returns = schema.returns().size();
  const size_t ret_idx = stack->size() - num_returns;
  for (size_t i = 0; i < num_returns; ++i) {
    const auto& iv = (*stack)[ret_idx + i];
    if (iv.isTensor()) {
      outs.push_back(iv.toTensor());
    } else if (iv.isTensorList()) {
      for (const auto& t : iv.toTensorList()) outs.push_back(t);
    }
  }
  for (const auto& t : mutated) outs.push_back(t);
  for (const auto& t : outs) check_card_written(t);
  if (rounds && !zero_copy) {  // the zero-copy path rounds while it moves results
    for (const auto& t : outs) {
      if (!on_device(t)) continue;
      auto to = rounding_for(t);
      if (to != at::ScalarType::Undefined) round_in_place(t, to);
    }
  }
  if (trace) {
    std::vector<at::Tensor> outs_on_device;
    for (const auto& t : outs) {
      if (!t.defined()) continue;
      bool seen = false;
      for (const auto& u : outs_on_device) seen = seen || u.is_same(t);
      if (!seen) outs_on_device.push_back(t);
    }
    emit(name, schema.overload_name(), native ? "native" : "fallback", ins, outs_on_device,
         device);
  }
}

// ---------------------------------------------------------------- convolution
// PyTorch routes convolutions of out-of-tree backends to convolution_overrideable, whose default
// kernel throws, so the boxed fallback never sees them. These run the host convolution on the
// device memory and are counted and traced as host fallbacks.
inline at::Tensor host_view(const at::Tensor& t) { return on_device(t) ? host_alias(t) : t; }

inline at::Tensor host_result_to_device(const at::Tensor& r, int device) {
  if (!r.defined()) return r;
  c10::DeviceGuard guard(at::Device(at::kPrivateUse1, static_cast<c10::DeviceIndex>(device)));
  at::Tensor out = at::empty(r.sizes(), r.options().device(at::kPrivateUse1));
  check_card_written(out);
  if (r.numel() > 0) host_alias(out).copy_(r);
  return out;
}

inline void count_fallback(const std::string& base) {
  auto& pol = policy();
  std::lock_guard<std::mutex> lock(pol.count_mutex);
  pol.fallback_count[base] += 1;
}

inline at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                           const std::optional<at::Tensor>& bias,
                                           c10::IntArrayRef stride, c10::IntArrayRef padding,
                                           c10::IntArrayRef dilation, bool transposed,
                                           c10::IntArrayRef output_padding, int64_t groups) {
  int device = input.device().index();
  std::optional<at::Tensor> hb;
  if (bias.has_value() && bias->defined()) hb = host_view(*bias);
  at::Tensor r = at::convolution(host_view(input), host_view(weight), hb, stride, padding,
                                 dilation, transposed, output_padding, groups);
  at::Tensor out = host_result_to_device(r, device);
  count_fallback("convolution_overrideable");
  if (tracing.load()) {
    std::vector<at::Tensor> ins{input, weight};
    if (hb) ins.push_back(*bias);
    emit("aten::convolution_overrideable", "", "fallback", ins, {out}, device);
  }
  return out;
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  int device = input.device().index();
  std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(
      host_view(grad_output), host_view(input), host_view(weight),
      output_mask[2] ? at::OptionalIntArrayRef(bias_sizes) : at::OptionalIntArrayRef(), stride,
      padding, dilation, transposed, output_padding, groups, output_mask);
  auto out = std::make_tuple(host_result_to_device(gi, device), host_result_to_device(gw, device),
                             host_result_to_device(gb, device));
  count_fallback("convolution_backward_overrideable");
  if (tracing.load()) {
    std::vector<at::Tensor> outs;
    for (const auto& t : {std::get<0>(out), std::get<1>(out), std::get<2>(out)}) {
      if (t.defined()) outs.push_back(t);
    }
    emit("aten::convolution_backward_overrideable", "", "fallback", {grad_output, input, weight},
         outs, device);
  }
  return out;
}

}  // namespace spyre::aten
