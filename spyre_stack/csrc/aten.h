// ATen registrations: the minimal device kernels (allocation, copies, resize, set_, views) and
// the boxed fallback that applies the op support table and the numerics policy, then runs the
// op on the host and reports it to the simulator's trace hook.
#pragma once

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
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
  std::unordered_map<std::string, int64_t> native_count;
  std::unordered_map<std::string, int64_t> fallback_count;
  std::mutex count_mutex;
};

inline Policy& policy() {
  static Policy* p = [] {
    auto* q = new Policy();
    q->round_to.fill(at::ScalarType::Undefined);
    q->host_only.fill(false);
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

inline void round_in_place(const at::Tensor& t, at::ScalarType to) {
  if (!t.defined() || t.numel() == 0) return;
  auto a = host_alias(t);
  a.copy_(a.to(to));
}

inline at::Tensor rounded_copy(const at::Tensor& t, at::ScalarType to) {
  auto c = at::empty_like(t);
  if (t.numel() > 0) host_alias(c).copy_(host_alias(t).to(to));
  return c;
}

inline bool on_device(const at::Tensor& t) { return t.defined() && t.is_privateuseone(); }

// ---------------------------------------------------------------- fallback
inline void spyre_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const std::string name = schema.name();
  const std::string base = base_name(name);
  auto& pol = policy();
  int code = lookup_status(base);
  const bool implicit_random = (code & kRandomFlag) != 0;
  int status = code & (kRandomFlag - 1);
  if (status == kUnsupported) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "spyre: ", name, ".", schema.overload_name(),
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
    }
  }
  if (device < 0) device = current_device();

  // Native ops compute in device precision: inputs are read through the rounding dtype.
  std::vector<at::Tensor> mutated;
  if (status == kNative) {
    for (size_t i = 0; i < num_args; ++i) {
      auto& iv = (*stack)[base_idx + i];
      bool mut = is_mutable_arg(schema, i);
      if (iv.isTensor()) {
        const auto& t = iv.toTensor();
        if (!on_device(t)) continue;
        auto to = pol.round_to[static_cast<size_t>(t.scalar_type())];
        if (mut) mutated.push_back(t);
        if (to == at::ScalarType::Undefined) continue;
        if (pol.warn_downcast && !pol.warned.exchange(true)) {
          TORCH_WARN("spyre: ", t.scalar_type(), " inputs are computed in ", to,
                     " on the Spyre device (set SPYRE_SILENCE_DOWNCAST_WARNING=1 to silence)");
        }
        if (mut) {
          round_in_place(t, to);
        } else {
          iv = rounded_copy(t, to);
        }
      } else if (iv.isTensorList() && !mut) {
        auto list = iv.toTensorList();
        bool any = false;
        for (size_t j = 0; j < list.size(); ++j) {
          at::Tensor t = list.get(j);
          if (!on_device(t)) continue;
          auto to = pol.round_to[static_cast<size_t>(t.scalar_type())];
          if (to == at::ScalarType::Undefined) continue;
          list.set(j, rounded_copy(t, to));
          any = true;
        }
        if (any) iv = list;
      }
    }
  } else {
    for (size_t i = 0; i < num_args; ++i) {
      auto& iv = (*stack)[base_idx + i];
      if (is_mutable_arg(schema, i) && iv.isTensor() && on_device(iv.toTensor())) {
        mutated.push_back(iv.toTensor());
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
    (status == kNative ? pol.native_count : pol.fallback_count)[base] += 1;
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
    at::native::cpu_fallback(op, stack);
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
  if (status == kNative) {
    for (const auto& t : outs) {
      if (!on_device(t)) continue;
      auto to = pol.round_to[static_cast<size_t>(t.scalar_type())];
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
    emit(name, schema.overload_name(), status == kNative ? "native" : "fallback", ins,
         outs_on_device, device);
  }
}

}  // namespace spyre::aten
