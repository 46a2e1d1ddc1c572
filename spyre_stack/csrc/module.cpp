// The spyre_stack C++ core: one translation unit so a cold build compiles the torch headers once.
// Registration happens when the shared object is loaded by spyre_stack.register().
#include <torch/extension.h>
#include <torch/csrc/utils/pybind.h>

#include "aten.h"
#include "runtime.h"

namespace spyre {

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

static bool register_runtime() {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &device_allocator());
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}
static bool runtime_registered [[maybe_unused]] = register_runtime();

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(aten::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(aten::empty_strided));
  m.impl("_copy_from", TORCH_FN(aten::copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(aten::copy_from_and_resize));
  m.impl("resize_", TORCH_FN(aten::resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(aten::set_source_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(aten::set_source_storage));
  m.impl("set_", TORCH_FN(aten::set_empty));
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_));
  m.impl("record_stream", TORCH_FN(aten::record_stream));
  m.impl("convolution_overrideable", TORCH_FN(aten::convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(aten::convolution_backward_overrideable));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}

// _copy_from resolves conj / neg bits itself (host_alias keeps them), so the Conjugate and
// Negative fallbacks must not materialise its arguments: that would clone -> copy_ -> _copy_from
// again and recurse until the stack overflows.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&aten::spyre_fallback>());
}

}  // namespace spyre

namespace {

py::dict memory_counters(int device) {
  spyre::check_device(static_cast<c10::DeviceIndex>(device));
  auto c = spyre::driver::memory().get(device);
  py::dict d;
  d["capacity"] = c.capacity;
  d["allocated"] = c.allocated;
  d["peak"] = c.peak;
  d["num_allocs"] = c.num_allocs;
  d["num_frees"] = c.num_frees;
  d["num_ooms"] = c.num_ooms;
  return d;
}

void set_op_table(const py::dict& table, int default_status, const std::string& path,
                  const std::string& policy_name) {
  auto& p = spyre::aten::policy();
  std::unique_lock<std::shared_mutex> lock(p.mutex);
  p.status.clear();
  for (auto item : table) {
    p.status[item.first.cast<std::string>()] = item.second.cast<int>();
  }
  p.default_status = default_status;
  p.table_path = path;
  p.policy_name = policy_name;
}

void set_numerics(const py::dict& round_to, const py::list& host_only, bool warn) {
  auto& p = spyre::aten::policy();
  p.round_to.fill(at::ScalarType::Undefined);
  p.host_only.fill(false);
  for (auto item : round_to) {
    auto from = item.first.cast<at::ScalarType>();
    p.round_to[static_cast<size_t>(from)] = item.second.cast<at::ScalarType>();
  }
  for (auto item : host_only) {
    p.host_only[static_cast<size_t>(item.cast<at::ScalarType>())] = true;
  }
  p.warn_downcast = warn;
  p.warned.store(false);
}

void set_card_refusals(const py::list& dtypes, bool device_copy, bool resize,
                       const py::dict& ops, const std::string& path) {
  auto& p = spyre::aten::policy();
  std::unique_lock<std::shared_mutex> lock(p.mutex);
  p.refused_dtype.fill(false);
  for (auto item : dtypes) p.refused_dtype[static_cast<size_t>(item.cast<at::ScalarType>())] = true;
  p.refuse_device_copy = device_copy;
  p.refuse_resize = resize;
  p.refused_ops.clear();
  for (auto item : ops) {
    p.refused_ops[item.first.cast<std::string>()] = item.second.cast<std::string>();
  }
  p.model_path = path;
}

py::dict op_counts() {
  auto& p = spyre::aten::policy();
  std::lock_guard<std::mutex> lock(p.count_mutex);
  py::dict native, fallback;
  for (auto& [k, v] : p.native_count) native[py::str(k)] = v;
  for (auto& [k, v] : p.fallback_count) fallback[py::str(k)] = v;
  py::dict d;
  d["native"] = native;
  d["fallback"] = fallback;
  d["zero_copy"] = p.zero_copy_count;
  return d;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("init", [](int count, int64_t capacity) {
    TORCH_CHECK(count >= 1 && count <= spyre::kMaxDevices, "spyre: device count must be in [1, ",
                spyre::kMaxDevices, "]");
    if (spyre::driver::memory().count() == 0) spyre::driver::memory().init(count, capacity);
  });
  m.def("device_count", [] { return spyre::device_count(); });
  m.def("current_device", [] { return static_cast<int>(spyre::current_device()); });
  m.def("set_device", [](int d) {
    spyre::check_device(static_cast<c10::DeviceIndex>(d));
    spyre::tls_device = static_cast<c10::DeviceIndex>(d);
  });
  m.def("memory_counters", &memory_counters);
  m.def("reset_peak", [](int d) { spyre::driver::memory().reset_peak(d); });
  m.def("set_capacity", [](int d, int64_t c) { spyre::driver::memory().set_capacity(d, c); });
  m.def("default_generator", [](int d) {
    return spyre::default_generator(static_cast<c10::DeviceIndex>(d));
  });
  m.def("stream_priority", [](int64_t id) { return spyre::stream_priority(id); });
  m.def("pool_size", [] { return spyre::kPoolSize; });
  m.def("set_op_table", &set_op_table);
  m.def("set_numerics", &set_numerics);
  m.def("set_card_refusals", &set_card_refusals);
  m.def("reset_downcast_warning", [] { spyre::aten::policy().warned.store(false); });
  m.def("op_counts", &op_counts);
  m.def("reset_op_counts", [] {
    auto& p = spyre::aten::policy();
    std::lock_guard<std::mutex> lock(p.count_mutex);
    p.native_count.clear();
    p.fallback_count.clear();
    p.zero_copy_count = 0;
  });
  m.def("set_trace_hook", [](py::object hook) {
    spyre::aten::trace_hook() = std::move(hook);
    spyre::aten::tracing.store(!spyre::aten::trace_hook().is_none());
  });
  m.def("crash", [] {
    // Deliberate hard crash of the simulated device (tests of run isolation use it).
    std::abort();
  });
}
